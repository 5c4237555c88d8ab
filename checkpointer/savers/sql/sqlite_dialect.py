"""SQLite specifics: JSON text read with json_each, `?`/`:name` placeholders, executemany."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from itertools import chain
from time import monotonic
from typing import Any

from checkpointer.savers.base import dumps_json
from checkpointer.savers.metadata import filter_path
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.migration import plan_upgrade
from checkpointer.savers.sql.parents import new_checkpoint_allowed, refused_put_plan
from checkpointer.savers.sql.plan import Op, Plan, Stmt, each
from checkpointer.savers.sql.schema import (
    BLOBS,
    CHECKPOINTS,
    STORED_CHANNELS,
    THREADS,
    VERSION_TABLE,
    WRITES,
)
from checkpointer.savers.sql.summaries import SUMMARY_CLOCK_SECONDS, refresh_summaries_stmts
from checkpointer.savers.sql.tails import TAILS_KEY, TailRow, whole_row

SQLITE_TS_FORMAT = "%Y-%m-%d %H:%M:%f"
"""What SQLite's strftime writes and the summary table stores (UTC, milliseconds)."""


def format_ts(when: datetime) -> str:
    """A datetime as SQLite's `strftime(SQLITE_TS_FORMAT, ...)` writes it, in UTC."""
    utc = when.astimezone(UTC)
    # Formatted by hand: `strftime` costs more than the rest of a put's parameters.
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d} "
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}.{utc.microsecond // 1000:03d}"
    )


def parse_ts(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


FILE_PRAGMAS = ("PRAGMA auto_vacuum = INCREMENTAL", "PRAGMA journal_mode = WAL")
"""Settings of a database file, made by `setup()` only (`SqliteDialect.file_setup_plan`):
both persist in the file, and changing either takes the write lock, which an ordinary
connection must never wait for (a read would then fail while another process writes)."""


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

MULTI_ROW_CHUNK = 100
"""Rows per multi-row INSERT (at most 900 bound parameters, under every SQLite's limit)."""

_INSERT_BLOBS = (
    f"INSERT INTO {BLOBS} (thread_id, checkpoint_ns, channel, version, type, blob) "
    "SELECT ?1, ?2, v.* FROM (VALUES"
)
"""A put's value rows, thread and namespace bound once (see `_multi_row_inserts`)."""
_BLOBS_TAIL = ") v WHERE true ON CONFLICT DO NOTHING"

ACTIVITY_MEMORY = 4096
"""Threads whose last activity statement a dialect remembers; beyond, it starts afresh."""


_NEXT_SEQ = (
    f"SELECT coalesce((SELECT seq FROM {CHECKPOINTS} WHERE thread_id = ?1 AND "
    "checkpoint_ns = ?2 AND seq IS NOT NULL ORDER BY seq DESC LIMIT 1), -1) + 1 AS v"
)
"""The next seq of the put's namespace (parameters ?1, ?2 of the checkpoint insert)."""
_RUN_START = (
    f"coalesce((SELECT p.run_start FROM {CHECKPOINTS} p WHERE p.thread_id = ?1 AND "
    "p.checkpoint_ns = ?2 AND p.checkpoint_id = ?4 AND p.seq = s.v - 1), s.v)"
)
"""The run a put continues: its parent's, when the parent is the previous seq."""


class SqliteDialect(Dialect):
    name = "sqlite"
    row_key = "rowid"  # BINARY collation: UTF-8 byte order is Python's str order
    checkpoints = CHECKPOINTS
    blobs = BLOBS
    writes = WRITES
    threads = THREADS
    stored_channels = STORED_CHANNELS

    def __init__(self, where: str = "SQLite database") -> None:
        self._where = where
        # thread id -> monotonic() of the last activity statement (`_activity_stmt`)
        self._activity: dict[str, float] = {}

    def describe(self) -> str:
        return self._where

    def p(self, name: str) -> str:
        return f":{name}"

    def encode_task_id(self, task_id: str) -> Any:
        """Task ids are stored as given (text)."""
        if not isinstance(task_id, str):
            raise ValueError(f"task id must be a string, got {task_id!r}")
        return task_id

    def json_damage(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "malformed JSON" in str(exc)

    def _json(self, column: str) -> str:
        """`column`, or when guarded NULL where it is not JSON (json_each raises on it)."""
        if not self.json_guarded:
            return column
        return f"CASE WHEN json_valid({column}) THEN {column} END"

    def versions_join(self, record: str, alias: str) -> str:
        return f"CROSS JOIN json_each({self._json(record)}, '$.channel_versions') AS {alias}"

    def hints_join(self, record: str, alias: str) -> str:
        # Found in the text before any parse: most records have none.
        return (
            f"CROSS JOIN json_each(CASE WHEN instr({record}, '\"{TAILS_KEY}\"') THEN "
            f"{self._json(record)} END, '$.{TAILS_KEY}') AS {alias}"
        )

    def versions_value(self, alias: str) -> str:
        # Integer versions come back as numbers; blob keys hold their text.
        return f"CAST({alias}.value AS TEXT)"

    def version_of(self, record: str, channel: str) -> str:
        # A channel name may hold any character, so it never becomes part of a JSON path.
        return (
            f"(SELECT CAST(jv.value AS TEXT) FROM json_each({self._json(record)}, "
            "'$.channel_versions') "
            f"AS jv WHERE jv.key = {channel})"
        )

    def _has_inline(self, record: str) -> str:
        # Writes put inline values first (`records.record_json`): a prefix test finds them.
        return f"substr({record}, 1, 18) = '{{\"channel_values\":'"

    def inline_has(self, record: str, channel: str, probe: str) -> str:
        # Cheap tests before the parse: inline values at the start of the
        # record, and the channel's key among them (up to the first `},"`, which no JSON
        # string holds: its quote would be escaped) when its name is plain.
        head = f"substr({record}, 1, instr({record}, '}},\"'))"
        return (
            f"({self._has_inline(record)} AND ({probe} IS NULL OR instr({head}, {probe}) > 0) "
            f"AND EXISTS (SELECT 1 FROM json_each({self._json(record)}, '$.channel_values') "
            f"AS iv WHERE iv.key = {channel}))"
        )

    def record_has_inline(self, record: str) -> str:
        return self._has_inline(record)

    def inline_keys_column(self, record: str) -> str:
        return (
            f"CASE WHEN {self._has_inline(record)} THEN (SELECT json_group_array("
            f"iv.key) FROM json_each({self._json(record)}, '$.channel_values') AS iv) END"
        )

    def inline_value(self, record: str, channel: str) -> tuple[str, str]:
        def field(name: str) -> str:
            return (
                f"(SELECT iv.{name} FROM json_each({self._json(record)}, '$.channel_values') "
                f"AS iv WHERE iv.key = {channel})"
            )

        return field("type"), f"CAST({field('value')} AS TEXT)"

    def counters_column(self, column: str) -> str:
        return f"json_extract({column}, '$.counters_since_delta_snapshot')"

    def versions_column(self, record: str) -> str:
        return f"json_extract({record}, '$.channel_versions')"

    def damaged_record_probe(self, record: str) -> str | None:
        if self.json_guarded:
            return None  # the guarded walk lists unreadable records instead
        # Records are JSON objects, so they end in "}"; only one that does not is parsed,
        # and json() raises "malformed JSON" on it (json_damage), like json_each would.
        return f"({record} NOT LIKE '%}}' AND json({record}) IS NULL)"

    def record_unreadable(self, record: str) -> str | None:
        if not self.json_guarded:
            return None
        return (
            f"CASE WHEN json_valid({record}) THEN json_type({record}) <> 'object' "
            f"OR json_type({record}, '$.channel_versions') <> 'object' ELSE 1 END"
        )

    def in_list(self, column: str, name: str) -> str:
        return f"{column} IN (SELECT value FROM json_each({self.p(name)}))"

    def list_param(self, values: Sequence[Any]) -> Any:
        return json.dumps(list(values))

    def metadata_filter(self, column: str, key_name: str, value_name: str, value: Any) -> str:
        # JSON equality (`checkpointer.savers.metadata`) by the filter value's type: SQLite
        # compares integers and reals by value, and json_type keeps booleans apart from
        # numbers (json_extract gives both as 1 and 0).
        path, param = self.p(key_name), self.p(value_name)
        kind = f"json_type({column}, {path})"
        if isinstance(value, bool):
            test = f"{kind} = '{'true' if value else 'false'}'"
        elif value is None:
            test = f"{kind} = 'null'"
        elif isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
            test = f"{column} -> {path} = {param}"  # as written: beyond what SQL compares
        elif isinstance(value, int | float):
            test = f"{kind} IN ('integer', 'real') AND {column} ->> {path} = {param}"
        elif isinstance(value, str):
            # As JSON text, both sides rendered by SQLite: `->>` would cut a string at NUL.
            test = f"{kind} = 'text' AND {column} -> {path} = json({param})"
        else:
            # Lists and objects: every node of each tree has a node at the same place in
            # the other, of the same kind (integer and real alike) and with an equal atom;
            # strings compared as JSON text, since an atom stops at NUL.
            root, other = f"({column} -> {path})", f"json({param})"
            same = (
                "b.fullkey = a.fullkey AND (CASE WHEN a.type IN ('integer', 'real') THEN 'n' "
                "ELSE a.type END) = (CASE WHEN b.type IN ('integer', 'real') THEN 'n' "
                f"ELSE b.type END) AND CASE WHEN a.type = 'text' THEN {root} -> a.fullkey = "
                f"{other} -> a.fullkey ELSE a.atom IS b.atom END"
            )
            stored, wanted = f"json_tree({root})", f"json_tree({other})"
            test = (
                f"{kind} = '{'array' if isinstance(value, list | tuple) else 'object'}' "
                f"AND NOT EXISTS (SELECT 1 FROM {stored} AS a WHERE NOT EXISTS "
                f"(SELECT 1 FROM {wanted} AS b WHERE {same})) "
                f"AND NOT EXISTS (SELECT 1 FROM {wanted} AS a WHERE NOT EXISTS "
                f"(SELECT 1 FROM {stored} AS b WHERE {same}))"
            )
        if self.json_guarded:  # metadata that is not JSON matches: reading it says why
            return f"CASE WHEN json_valid({column}) THEN ({test}) ELSE 1 END"
        return f"({test})"

    def metadata_filter_params(self, key: str, value: Any) -> tuple[Any, Any]:
        # Names are validated ([A-Za-z0-9_-]), safe inside a quoted JSON path; the path is
        # still bound as a parameter, never spliced into the SQL.
        path = "$" + "".join(f'."{name}"' for name in filter_path(key))
        if isinstance(value, bool) or value is None:
            return path, None
        if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
            return path, dumps_json(value)
        if isinstance(value, int | float):
            return path, value
        return path, dumps_json(value)

    def ts_param(self, when: datetime) -> Any:
        return format_ts(when)

    def decode_ts(self, value: Any) -> datetime | None:
        return parse_ts(value)

    def add_seconds(self, ts: str, seconds: str) -> str:
        return f"strftime('{SQLITE_TS_FORMAT}', {ts}, '+' || ({seconds}) || ' seconds')"

    def greatest(self, *values: str) -> str:
        return f"max({', '.join(values)})"  # SQLite's scalar max() of several arguments

    def least(self, *values: str) -> str:
        return f"min({', '.join(values)})"

    def size(self, column: str, *, text: bool = False) -> str:
        # length() of a BLOB is its byte count, read without loading overflow pages.
        return f"length(CAST({column} AS BLOB))" if text else f"length({column})"

    def json_field(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    def ids_table(self, name: str) -> str:
        return f"(SELECT value AS tid FROM json_each({self.p(name)}))"

    def insert_blobs(self, thread_id: str, rows: list[tuple[str, str, str, str, bytes]]) -> Stmt:
        return Stmt(
            f"INSERT INTO {BLOBS} (thread_id, checkpoint_ns, channel, version, type, blob) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(thread_id, *row) for row in rows],
            many=True,
        )

    def put_plan(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        parent_id: str | None,
        run_id: str | None,
        record: str,
        metadata: str,
        blobs: list[tuple[str, str, str, bytes]],
        now: datetime,
        tails: Sequence[TailRow] = (),
    ) -> Op[None]:
        activity = self._activity_stmt(thread_id, now)

        def plan() -> Plan[None]:
            # The thread summary's count, bytes and head follow by trigger (revision 0004).
            yield from self._multi_row_inserts(_INSERT_BLOBS, _BLOBS_TAIL, blobs, (thread_id, ns))
            for tail in tails:
                inserted = yield Stmt(
                    self.sql(("put_tail",), _put_tail_sql),
                    (
                        thread_id,
                        ns,
                        tail.channel,
                        tail.version,
                        tail.type,
                        tail.blob,
                        tail.base_version,
                        tail.base_size,
                    ),
                    fetch=True,
                )
                if not inserted:  # its base is not stored (or the row exists: a re-put)
                    whole = whole_row(tail)
                    yield from self._multi_row_inserts(
                        _INSERT_BLOBS, _BLOBS_TAIL, [whole], (thread_id, ns)
                    )
            # Written unless it is new and a stored checkpoint names it as its parent, and
            # on a re-put only if the parent is the stored one (`parents.py`): no row back
            # means refused.
            written = yield Stmt(
                self.sql(("put_checkpoint",), self._put_checkpoint_sql),
                (thread_id, ns, checkpoint_id, parent_id, run_id, record, metadata),
                fetch=True,
            )
            if not written:  # raises; the transaction rolls back what came before
                yield from refused_put_plan(self, thread_id, ns, checkpoint_id, parent_id)
            if activity is not None:
                yield activity

        # A checkpoint alone (every value inline or unchanged) is one atomic statement.
        if blobs or tails or activity is not None:
            return Op(plan(), txn=True)
        return Op(plan(), write=True)

    def _put_checkpoint_sql(self) -> str:
        return (
            f"INSERT INTO {CHECKPOINTS} (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, run_id, checkpoint, metadata, seq, run_start) "
            f"SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, s.v, {_RUN_START} FROM ({_NEXT_SEQ}) s WHERE "
            + new_checkpoint_allowed(CHECKPOINTS, "?1", "?2", "?3")
            + " ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
            + self.checkpoint_upsert_values()
            + " WHERE parent_checkpoint_id IS excluded.parent_checkpoint_id RETURNING 1"
        )

    def put_writes_plan(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        task_id: Any,
        task_path: str,
        rows: list[tuple[int, str, str, bytes]],
        replace: bool,
        now: datetime,
        task_name: str | None = None,
    ) -> Op[None]:
        conflict = (
            "DO UPDATE SET task_path = excluded.task_path, channel = excluded.channel, "
            "type = excluded.type, blob = excluded.blob"
            if replace
            else "DO NOTHING"
        )
        # The five key columns every row shares are bound once (?1-?5), each row binds
        # its own four. Each row takes the seq of its checkpoint, if stored (else the
        # checkpoint's insert trigger fills it in, revision 0008): an uncorrelated
        # subquery, so SQLite looks it up once per statement, not once per row.
        insert = (
            f"INSERT INTO {WRITES} (thread_id, checkpoint_ns, checkpoint_id, task_id, "
            "task_path, idx, channel, type, blob, seq) SELECT ?1, ?2, ?3, ?4, ?5, v.*, "
            f"(SELECT c.seq FROM {CHECKPOINTS} c WHERE c.thread_id = ?1 "
            "AND c.checkpoint_ns = ?2 AND c.checkpoint_id = ?3) FROM (VALUES"
        )
        on_conflict = (
            ") v WHERE true "
            f"ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict}"
        )
        shared = (thread_id, ns, checkpoint_id, task_id, task_path)
        activity = self._activity_stmt(thread_id, now)

        def plan() -> Plan[None]:
            # The summary's bytes follow by trigger, replaced rows by their size change.
            yield from self._multi_row_inserts(insert, on_conflict, rows, shared)
            if activity is not None:
                yield activity

        if activity is None and len(rows) <= MULTI_ROW_CHUNK:
            return Op(plan(), write=True)  # one statement: atomic without BEGIN/COMMIT
        return Op(plan(), txn=True)

    def _activity_stmt(self, thread_id: str, now: datetime) -> Stmt | None:
        """Move the summary's last-write time (and with it a TTL's expiry) to `now`, or
        None when this dialect did so for the thread within `SUMMARY_CLOCK_SECONDS`: the
        summary moves it only once it is that old, so the statement would change nothing.

        Writes of other processes or savers are not seen here; each moves it for its own
        writes, at most once a second per thread."""
        tick = monotonic()
        last = self._activity.get(thread_id)
        if last is not None and tick - last < SUMMARY_CLOCK_SECONDS:
            return None
        if len(self._activity) >= ACTIVITY_MEMORY:
            self._activity.clear()
        self._activity[thread_id] = tick
        at = format_ts(now)
        moved = f":now > {self.add_seconds('updated_at', str(SUMMARY_CLOCK_SECONDS))}"
        return Stmt(
            f"UPDATE {THREADS} SET updated_at = :now, expires_at = CASE WHEN ttl_seconds "
            f"IS NULL THEN NULL ELSE {self.add_seconds(':now', 'ttl_seconds')} END "
            f"WHERE thread_id = :thread_id AND {moved}",
            {"thread_id": thread_id, "now": at},
        )

    def _multi_row_inserts(
        self,
        insert: str,
        tail: str,
        rows: Sequence[tuple[Any, ...]],
        shared: tuple[Any, ...] = (),
    ) -> Iterator[Stmt]:
        """`insert` (...), (...) `tail`: one statement per chunk of rows instead of one
        per row (executemany), far below SQLite's bound-parameter limit. `insert` ends in
        `FROM (VALUES` and `tail` closes it: `shared` are values `insert` names as ?1,
        ?2, ... once for every row; each row's own `?`s are numbered after them (SQLite
        numbers a bare `?` one past the largest so far)."""
        for start in range(0, len(rows), MULTI_ROW_CHUNK):
            chunk = rows[start : start + MULTI_ROW_CHUNK]
            width = len(chunk[0])

            def build(count: int = len(chunk), width: int = width) -> str:
                row = "(" + ", ".join("?" * width) + ")"
                return f"{insert} {', '.join([row] * count)} {tail}"

            sql = self.sql(("multi_row", insert, tail, len(chunk), width), build)
            yield Stmt(sql, (*shared, *chain.from_iterable(chunk)))

    def delete_keys(self, table: str, columns: Sequence[str], keys: list[tuple[Any, ...]]) -> Stmt:
        where = " AND ".join(f"{c} = ?" for c in columns)
        return Stmt(f"DELETE FROM {table} WHERE {where}", keys, many=True)

    def delete_thread_plan(self, thread_id: str) -> Op[None]:
        def plan() -> Plan[None]:
            for table in (CHECKPOINTS, WRITES, BLOBS, STORED_CHANNELS, THREADS):
                yield Stmt(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))

        return Op(plan(), txn=True)

    def copy_thread_plan(self, source: str, target: str) -> Op[None]:
        def plan() -> Plan[None]:
            params = {"src": source, "dst": target}
            yield Stmt(
                f"INSERT INTO {CHECKPOINTS} (thread_id, checkpoint_ns, checkpoint_id, "
                "parent_checkpoint_id, run_id, checkpoint, metadata, pinned, seq, run_start) "
                "SELECT :dst, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
                f"checkpoint, metadata, pinned, seq, run_start FROM {CHECKPOINTS} "
                "WHERE thread_id = :src "
                "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
                "parent_checkpoint_id = excluded.parent_checkpoint_id, seq = excluded.seq, "
                "run_start = excluded.run_start, " + self.checkpoint_upsert_values(),
                params,
            )
            yield Stmt(
                f"INSERT INTO {BLOBS} (thread_id, checkpoint_ns, channel, version, type, blob, "
                "base_version) SELECT :dst, checkpoint_ns, channel, version, type, blob, "
                f"base_version FROM {BLOBS} WHERE thread_id = :src ON CONFLICT DO NOTHING",
                params,
            )
            yield Stmt(
                f"INSERT INTO {WRITES} (thread_id, checkpoint_ns, checkpoint_id, task_id, "
                "task_path, idx, channel, type, blob, seq) "
                "SELECT :dst, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
                f"type, blob, seq FROM {WRITES} WHERE thread_id = :src "
                "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE "
                "SET task_path = excluded.task_path, channel = excluded.channel, "
                "type = excluded.type, blob = excluded.blob",
                params,
            )
            yield from each(refresh_summaries_stmts(self, [target], datetime.now(UTC)))

        return Op(plan(), txn=True)

    def version_plan(self) -> Plan[str | None]:
        rows = yield Stmt(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?",
            (VERSION_TABLE,),
            fetch=True,
        )
        if not rows:
            return None
        rows = yield Stmt(f"SELECT version_num FROM {VERSION_TABLE}", (), fetch=True)
        return rows[0][0] if rows else None

    def file_setup_plan(self) -> Plan[None]:
        # auto_vacuum only takes effect before the first table exists (a new file, or at
        # the next VACUUM), so it is asked for before the migration creates the tables;
        # `reclaim_space()` can then shrink the file with an incremental vacuum. Both
        # settings persist in the file, so connections never repeat them.
        for pragma in FILE_PRAGMAS:
            yield Stmt(pragma, (), fetch=True)

    def setup_plan(self) -> Plan[None]:
        """Run inside BEGIN IMMEDIATE: one process migrates, the others wait, then see it
        done."""
        found = yield from self.version_plan()
        statements = plan_upgrade("sqlite", None, found, where=self.describe())
        for sql in statements or ():
            yield Stmt(sql, ())


def _put_tail_sql() -> str:
    """A tail row, inserted only if its base is stored whole with the size remembered
    (`tails.py`); returns a row if it was inserted."""
    return (
        f"INSERT INTO {BLOBS} (thread_id, checkpoint_ns, channel, version, type, blob, "
        f"base_version) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 WHERE EXISTS (SELECT 1 FROM {BLOBS} b "
        "WHERE b.thread_id = ?1 AND b.checkpoint_ns = ?2 AND b.channel = ?3 AND b.version = ?7 "
        "AND b.base_version IS NULL AND length(b.blob) = ?8) ON CONFLICT DO NOTHING RETURNING 1"
    )
