"""PostgreSQL specifics: jsonb, arrays with unnest (one round trip per bulk write),
`uuid` task ids, a configurable schema, and setup under an advisory lock."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from checkpointer.errors import ConfigError
from checkpointer.savers.base import dumps_json
from checkpointer.savers.metadata import escape_json_text, filter_path
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.migration import plan_upgrade
from checkpointer.savers.sql.parents import refused_put_plan
from checkpointer.savers.sql.plan import Op, Plan, Stmt, each
from checkpointer.savers.sql.schema import (
    BLOBS,
    CHECKPOINTS,
    THREADS,
    VERSION_TABLE,
    WRITES,
    quote_ident,
)
from checkpointer.savers.sql.summaries import (
    SUMMARY_COLUMNS,
    refresh_summaries_stmts,
    summary_merge,
)
from checkpointer.savers.sql.tails import TAILS_KEY, TailRow, whole_row

_CASTS = {
    "text": "text",
    "float": "double precision",
    "bigint": "bigint",
    "int": "integer",
    "ts": "timestamptz",
    "bool": "boolean",
}


def encode_task_id(task_id: str) -> str:
    """The stored form of a canonical UUID task id on PostgreSQL (a `uuid` column).

    Only canonical UUID strings are taken as they are, so what is read back equals what
    was given; other ids are stored by `encode_write_key` under a name (`task_name`)."""
    try:
        canonical = str(uuid.UUID(task_id))
    except (ValueError, TypeError, AttributeError):
        canonical = None
    if canonical != task_id:
        raise ValueError(
            f"task id {task_id!r} is not a canonical UUID string; the PostgreSQL savers "
            "store task ids in a uuid column"
        )
    return canonical


_UUID_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

# Task ids that are not UUIDs ("task-1" in LangGraph's tests, a runtime of one's own) go
# into the uuid column as a UUID derived from them (uuid5 in this namespace: the same id
# always gives the same key, so re-sent writes still collide with themselves), with the
# id itself in `task_name` (NULL for every UUID id: nothing more stored on the hot path).
# Readers take `coalesce(task_name, task_id::text)`, so they get the exact string back
# and order by it as text, which for UUIDs is the uuid order (see `task_id_text`).
_NAMED_TASK_NAMESPACE = uuid.UUID("6c1f3a52-0d4e-5b8a-9f27-3e6a1d0c4b95")


def task_name(task_id: str) -> str | None:
    """The `task_name` stored with a task id: None for the ids the uuid column holds
    itself (canonical UUIDs, LangGraph's negative-step ids), else the id."""
    if isinstance(task_id, str) and (_UUID_TEXT.match(task_id) or _NEGATIVE_STEP_ID.match(task_id)):
        return None
    if not isinstance(task_id, str):
        raise ConfigError(f"task id must be a string, got {task_id!r}")
    if "\x00" in task_id:
        raise ConfigError(f"task id {task_id!r} holds NUL, which PostgreSQL text cannot store")
    try:
        task_id.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"task id {task_id!r} is not valid UTF-8 (a lone surrogate)") from None
    return task_id


# LangGraph's exit-durability writes of a negative step carry ids like
# "-0000001-0000-0000-0000-000000000000": the step in decimal, then a UUID's last four groups.
# Not a UUID, so the uuid column stores "00000000-<same groups>" and the step moves into
# `idx`, shifted far below any real slot. Rows still sort as the text ids do (the shifted
# idx of step -2 < step -1 < any real slot), and decoding gives back the exact string.
# (Stored so since revision 0001; kept, so that rows written then and re-sent now agree.)
_NEGATIVE_STEP_ID = re.compile(r"^-(\d{7})-([0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")
_STEP_SHIFT = 1 << 24
_MAX_SHIFTED_STEPS = 100


def encode_write_key(task_id: str, idx: int) -> tuple[str, int]:
    """The stored `(task_id, idx)` of a write on PostgreSQL (see `_NEGATIVE_STEP_ID` and
    `task_name`)."""
    match = _NEGATIVE_STEP_ID.match(task_id) if isinstance(task_id, str) else None
    if match is None:
        if task_name(task_id) is not None:
            return str(uuid.uuid5(_NAMED_TASK_NAMESPACE, task_id)), idx
        return encode_task_id(task_id), idx
    step = int(match.group(1))
    if not 1 <= step <= _MAX_SHIFTED_STEPS or not -_STEP_SHIFT // 2 < idx < _STEP_SHIFT // 2:
        raise ValueError(f"task id {task_id!r} with slot {idx} cannot be stored losslessly")
    return f"00000000-{match.group(2)}", idx - step * _STEP_SHIFT


def decode_write_key(stored_task_id: Any, stored_idx: int) -> tuple[str, int]:
    """What `encode_write_key` was given, from the stored key as readers select it
    (`task_id_text`: a named task's name, else the uuid's text)."""
    text, idx = str(stored_task_id), int(stored_idx)
    if idx > -_STEP_SHIFT // 2 or not _UUID_TEXT.match(text):
        return text, idx
    step = -round(idx / _STEP_SHIFT)
    return f"-{step:07d}-{text[9:]}", idx + step * _STEP_SHIFT


VALUES_ROWS_MAX = 32
"""Up to this many rows go into a statement as a VALUES list of scalar parameters, which
psycopg dumps in C; more as one array per column (`unnest`), dumped in Python but bound as
a handful of parameters whatever the count."""

_BLOB_COLUMNS = (("channel", "text"), ("version", "text"), ("type", "text"), ("blob", "bytea"))
_TAIL_COLUMNS = (
    ("t_channel", "text"),
    ("t_version", "text"),
    ("t_type", "text"),
    ("t_blob", "bytea"),
    ("t_base", "text"),
    ("t_size", "bigint"),
)
_WRITE_COLUMNS = (("idx", "int"), ("channel", "text"), ("type", "text"), ("blob", "bytea"))


def rows_select(
    columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]], params: dict[str, Any]
) -> str:
    """A SELECT of `rows` as columns `(name, sql type)`, its values added to `params`.

    A step writes a few small rows; building arrays of them cost more than running the
    statement, so few rows go in as VALUES."""
    rows_params(columns, rows, params)
    return rows_select_text(tuple(columns), len(rows))


def rows_params(
    columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]], params: dict[str, Any]
) -> None:
    """The parameters of `rows_select(columns, rows, params)`, added to `params`."""
    if len(rows) <= VALUES_ROWS_MAX:
        names = [name for name, _ in columns]
        for i, row in enumerate(rows):
            for name, value in zip(names, row, strict=True):
                params[f"r{i}_{name}"] = value
        return
    for j, (name, _) in enumerate(columns):
        params[f"a_{name}"] = [row[j] for row in rows]


@lru_cache(maxsize=256)
def rows_select_text(columns: tuple[tuple[str, str], ...], count: int) -> str:
    """The text of `rows_select` for `count` rows: the same for every put of that shape."""
    names = ", ".join(name for name, _ in columns)
    if count <= VALUES_ROWS_MAX:
        tuples = []
        for i in range(count):
            cells = []
            for name, kind in columns:
                key = f"r{i}_{name}"
                # Bytes go in binary under `%s` as under `%b` (psycopg's automatic
                # format); `%s` lets a put of many values skip psycopg's parse (`pg_native`).
                cells.append(f"%({key})s::{kind}")
            tuples.append("(" + ", ".join(cells) + ")")
        return f"SELECT * FROM (VALUES {', '.join(tuples)}) AS v({names})"
    arrays = []
    for name, kind in columns:
        arrays.append(f"%(a_{name})b::bytea[]" if kind == "bytea" else f"%(a_{name})s::{kind}[]")
    return f"SELECT * FROM unnest({', '.join(arrays)}) AS v({names})"


class PostgresDialect(Dialect):
    name = "postgresql"

    def __init__(self, schema: str = "public") -> None:
        if isinstance(schema, str) and "%" in schema:
            # psycopg reads % as a placeholder marker in statements with parameters.
            raise ConfigError(f"PostgreSQL schema name {schema!r} must not contain '%'")
        self.schema = schema
        q = quote_ident(schema)
        self.checkpoints = f"{q}.{CHECKPOINTS}"
        self.blobs = f"{q}.{BLOBS}"
        self.writes = f"{q}.{WRITES}"
        self.threads = f"{q}.{THREADS}"
        self.version_table = f"{q}.{VERSION_TABLE}"
        digest = hashlib.sha256(f"checkpointer-setup:{schema}".encode()).digest()
        self.lock_key = int.from_bytes(digest[:8], "big", signed=True)

    def describe(self) -> str:
        return f"PostgreSQL schema {self.schema!r}"

    def p(self, name: str) -> str:
        return f"%({name})s"

    def bigint(self, expr: str) -> str:
        return f"CAST({expr} AS bigint)"

    def text(self, expr: str) -> str:
        return f"CAST({expr} AS text)"

    def null(self, kind: str) -> str:
        return {"text": "NULL::text", "int": "NULL::integer", "bytes": "NULL::bytea"}[kind]

    def json_param(self, name: str) -> str:
        return f"{self.p(name)}::jsonb"

    def task_id_text(self, column: str) -> str:
        # The exact id (a named task's name, see `task_name`), ordered bytewise as text.
        prefix = column[: column.rindex(".") + 1] if "." in column else ""
        return f'coalesce({prefix}task_name, {column}::text) COLLATE "C"'

    def task_name(self, task_id: str) -> str | None:
        return task_name(task_id)

    def encode_task_id(self, task_id: str) -> Any:
        return encode_task_id(task_id)

    def encode_write_key(self, task_id: str, idx: int) -> tuple[Any, int]:
        return encode_write_key(task_id, idx)

    def encode_write_keys(self, task_id: str, idxs: Sequence[int]) -> tuple[Any, list[int]]:
        # Only a negative-step id shifts its slots; any other id is parsed once, not per
        # write, and keeps them.
        if isinstance(task_id, str) and _NEGATIVE_STEP_ID.match(task_id) is None:
            return encode_write_key(task_id, 0)[0], list(idxs)
        return super().encode_write_keys(task_id, idxs)

    def decode_write_key(self, stored_task_id: Any, stored_idx: int) -> tuple[str, int]:
        return decode_write_key(stored_task_id, stored_idx)

    def decode_write_keys(
        self, stored_task_ids: Sequence[Any], stored_idxs: Sequence[Any]
    ) -> list[tuple[str, int]]:
        # Only a step-keyed id, its idx shifted far below zero, is rebuilt by the decoder;
        # without one (the usual batch) every key passes as it is, with no Python call
        # per write (a thousand in a deep delta history).
        if not stored_idxs or min(stored_idxs) > -_STEP_SHIFT // 2:
            return list(zip(map(str, stored_task_ids), map(int, stored_idxs)))
        return list(map(decode_write_key, stored_task_ids, stored_idxs))

    def lookup(self, table: str, alias: str, columns: str, condition: str) -> str:
        # OFFSET 0 keeps the subquery from being flattened back into a plain join.
        return (
            f"CROSS JOIN LATERAL (SELECT {columns} FROM {table} {alias} "
            f"WHERE {condition} OFFSET 0) {alias}"
        )

    def json_damage(self, exc: BaseException) -> bool:
        # jsonb_each_text on a record whose channel_versions is not an object.
        return getattr(exc, "sqlstate", None) == "22023" and "non-object" in str(exc)

    def versions_join(self, record: str, alias: str) -> str:
        versions = f"{record} -> 'channel_versions'"
        if self.json_guarded:
            versions = f"CASE WHEN jsonb_typeof({versions}) = 'object' THEN {versions} END"
        return f"CROSS JOIN LATERAL jsonb_each_text({versions}) AS {alias}"

    def hints_join(self, record: str, alias: str) -> str:
        hints = f"{record} -> '{TAILS_KEY}'"
        if self.json_guarded:
            hints = f"CASE WHEN jsonb_typeof({hints}) = 'object' THEN {hints} END"
        return f"CROSS JOIN LATERAL jsonb_each_text({hints}) AS {alias}"

    def version_of(self, record: str, channel: str) -> str:
        return f"({record} -> 'channel_versions' ->> {channel})"

    def inline_has(self, record: str, channel: str, probe: str) -> str:
        return f"coalesce(({record} -> 'channel_values') ? {channel}, false)"

    def record_has_inline(self, record: str) -> str:
        return f"({record} ? 'channel_values')"

    def inline_keys_column(self, record: str) -> str:
        return (
            f"(SELECT jsonb_agg(k) FROM jsonb_object_keys(CASE WHEN jsonb_typeof("
            f"{record} -> 'channel_values') = 'object' THEN {record} -> 'channel_values' END) k)"
        )

    def inline_value(self, record: str, channel: str) -> tuple[str, str]:
        value = f"({record} -> 'channel_values' -> {channel})"
        return f"jsonb_typeof({value})", f"({record} -> 'channel_values' ->> {channel})"

    def counters_column(self, column: str) -> str:
        return f"{column} -> 'counters_since_delta_snapshot'"

    def versions_column(self, record: str) -> str:
        return f"{record} -> 'channel_versions'"

    def in_list(self, column: str, name: str) -> str:
        return f"{column} = ANY({self.p(name)}::text[])"

    def list_param(self, values: Sequence[Any]) -> Any:
        return list(values)

    def metadata_filter(self, column: str, key_name: str, value_name: str, value: Any) -> str:
        # jsonb equality is the filter rule (`checkpointer.savers.metadata`); the path is a
        # bound text[] of the dotted key's names.
        return f"{column} #> {self.p(key_name)} = {self.p(value_name)}::jsonb"

    def metadata_filter_params(self, key: str, value: Any) -> tuple[Any, Any]:
        # Escaped as stored metadata is, so a filter for a string with NUL finds it.
        return list(filter_path(key)), escape_json_text(dumps_json(value))

    def check_metadata(self, text: str) -> str:
        return escape_json_text(text)

    def typed(self, expr: str, kind: str) -> str:
        return f"CAST({expr} AS {_CASTS[kind]})"

    def ts_param(self, when: datetime) -> Any:
        return when if when.tzinfo else when.replace(tzinfo=UTC)

    def decode_ts(self, value: Any) -> datetime | None:
        if value is None:
            return None
        parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        # The session's time zone is the server's business; summaries speak UTC.
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)

    def add_seconds(self, ts: str, seconds: str) -> str:
        return f"({ts} + ({seconds}) * interval '1 second')"

    def greatest(self, *values: str) -> str:
        return f"GREATEST({', '.join(values)})"

    def least(self, *values: str) -> str:
        return f"LEAST({', '.join(values)})"

    def size(self, column: str, *, text: bool = False) -> str:
        # bytea lengths come from the TOAST header, without detoasting the value.
        return f"octet_length({column}::text)" if text else f"octet_length({column})"

    def json_field(self, column: str, key: str) -> str:
        return f"({column} ->> '{key}')"

    def ids_table(self, name: str) -> str:
        return f"(SELECT unnest({self.p(name)}::text[]) AS tid)"

    def lock_thread(self, thread_id: str) -> Stmt | None:
        # put and put_writes upsert this row in the statement that writes them, so they
        # queue behind the lock (a thread without a summary row has no writer to stop).
        return Stmt(
            f"SELECT thread_id FROM {self.threads} WHERE thread_id = %(t)s FOR UPDATE",
            {"t": thread_id},
            fetch=True,
        )

    def insert_blobs(self, thread_id: str, rows: list[tuple[str, str, str, str, bytes]]) -> Stmt:
        params: dict[str, Any] = {"t": thread_id}
        values = rows_select((("ns", "text"), *_BLOB_COLUMNS), rows, params)
        return Stmt(
            f"INSERT INTO {self.blobs} (thread_id, checkpoint_ns, channel, version, type, blob) "
            f"SELECT %(t)s, x.ns, x.channel, x.version, x.type, x.blob FROM ({values}) x "
            "ON CONFLICT DO NOTHING",
            params,
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
        base: dict[str, Any] = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "parent_id": parent_id,
            "run_id": run_id,
            "record": record,
            "metadata": metadata,
            "head": checkpoint_id if ns == "" else None,
            "now": self.ts_param(now),
        }

        def plan(blobs: list[tuple[str, str, str, bytes]], tails: Sequence[TailRow]) -> Plan[None]:
            params = dict(base)
            if blobs:
                rows_params(_BLOB_COLUMNS, blobs, params)
            if tails:
                rows_params(
                    _TAIL_COLUMNS,
                    [
                        (t.channel, t.version, t.type, t.blob, t.base_version, t.base_size)
                        for t in tails
                    ],
                    params,
                )
            sql = self.sql(
                ("put", parent_id is None, len(blobs), len(tails)),
                lambda: self._put_sql(parent_id is None, len(blobs), len(tails)),
            )
            rows = yield Stmt(sql, params, fetch=True)
            if not rows[0][0]:
                if tails and not rows[0][1]:
                    # A base is not stored: nothing was written; again with the tails whole.
                    yield from plan([*blobs, *(whole_row(t) for t in tails)], ())
                    return
                yield from refused_put_plan(self, thread_id, ns, checkpoint_id, parent_id)

        return Op(plan(blobs, tails))

    def _put_sql(self, parent_none: bool, blob_rows: int, tail_rows: int = 0) -> str:
        """The put statement for this shape of put (its text depends on nothing else)."""
        key = (
            "thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s "
            "AND checkpoint_id = %(checkpoint_id)s"
        )
        size = f"{self.size('checkpoint', text=True)} + {self.size('metadata', text=True)}"
        # The stored row this put replaces is looked up with its parent too: a re-put keeps
        # its parent, so the row is found all the same, and whichever index the planner
        # takes reads one entry (on fresh tables, without statistics, it takes the parent
        # index's (thread, namespace) prefix for a primary-key probe, and a probe by id
        # alone then reads every checkpoint of the namespace).
        parent_is = (
            "parent_checkpoint_id IS NULL"
            if parent_none
            else "parent_checkpoint_id = %(parent_id)s"
        )
        # Blobs, checkpoint and thread summary in one statement: one round trip, atomic in
        # autocommit. Every CTE sees the rows as they were before the statement, so `prior`
        # is the checkpoint this put replaces, if any.
        # `ok`: no stored checkpoint names a new one as its parent (the rule of
        # `parents.new_checkpoint_allowed`, with `prior` for "the checkpoint is stored": a
        # row stored under another parent is refused by the upsert all the same). A re-put
        # must keep the stored parent: the upsert tests it on the row the primary key finds,
        # and `cp` returns no row otherwise. Nothing else is written unless `cp` returns its
        # row, and the statement says whether it did: the checks cost no round trip.
        ctes = [
            f"prior AS (SELECT {size} AS n FROM {self.checkpoints} WHERE {key} AND {parent_is})",
            f"ok AS (SELECT NOT EXISTS (SELECT 1 FROM {self.checkpoints} ch WHERE "
            "ch.thread_id = %(thread_id)s AND ch.checkpoint_ns = %(checkpoint_ns)s AND "
            "ch.parent_checkpoint_id = %(checkpoint_id)s) OR EXISTS (SELECT 1 FROM prior) AS v)",
            # The next seq of the namespace, and the run it continues (see `delta_runs`).
            # Materialized: inlined, its probe ran twice (`seq.v` again in the run's probe).
            f"seq AS MATERIALIZED (SELECT coalesce((SELECT s.seq FROM {self.checkpoints} s "
            "WHERE s.thread_id = %(thread_id)s AND s.checkpoint_ns = %(checkpoint_ns)s "
            "AND s.seq IS NOT NULL ORDER BY s.seq DESC LIMIT 1), -1) + 1 AS v)",
            f"cp AS (INSERT INTO {self.checkpoints} (thread_id, checkpoint_ns, checkpoint_id, "
            "parent_checkpoint_id, run_id, checkpoint, metadata, seq, run_start) "
            "SELECT CAST(%(thread_id)s AS text), CAST(%(checkpoint_ns)s AS text), "
            "CAST(%(checkpoint_id)s AS text), CAST(%(parent_id)s AS text), "
            "CAST(%(run_id)s AS text), %(record)s::jsonb, %(metadata)s::jsonb, seq.v, "
            f"coalesce((SELECT p.run_start FROM {self.checkpoints} p WHERE p.thread_id = "
            "%(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s AND p.checkpoint_id = "
            "%(parent_id)s AND p.seq = seq.v - 1), seq.v) FROM seq "
            "WHERE (SELECT v FROM ok) "
            + ("AND (SELECT v FROM bases_ok) " if tail_rows else "")
            + "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
            + self.checkpoint_upsert_values()
            + f" WHERE {CHECKPOINTS}.parent_checkpoint_id IS NOT DISTINCT FROM "
            f"excluded.parent_checkpoint_id RETURNING {size} AS n, seq)",
            # Writes that arrived before their checkpoint take its seq now.
            f"early AS (UPDATE {self.writes} w SET seq = (SELECT cp.seq FROM cp) WHERE "
            "w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s AND "
            "w.checkpoint_id = %(checkpoint_id)s AND w.seq IS NULL AND EXISTS (SELECT 1 FROM cp))",
        ]
        if tail_rows:
            tails = rows_select_text(_TAIL_COLUMNS, tail_rows)
            # Every tail's base is stored whole, with the size its put remembered
            # (`tails.py`); if not, nothing is written and the put goes again whole.
            ctes.insert(
                2,
                # Locked (FOR KEY SHARE): a deletion not yet committed is waited for, and
                # a base it removed is then missing, rather than seen in this snapshot.
                f"bases_ok AS (SELECT (SELECT count(*) FROM (SELECT 1 FROM {self.blobs} b "
                f"JOIN ({tails}) x ON b.channel = x.t_channel AND b.version = x.t_base "
                f"AND {self.size('b.blob')} = x.t_size WHERE b.thread_id = %(thread_id)s AND "
                "b.checkpoint_ns = %(checkpoint_ns)s AND b.base_version IS NULL "
                f"FOR KEY SHARE OF b) l) = {tail_rows} AS v)",
            )
            ctes.append(
                f"new_tails AS (INSERT INTO {self.blobs} (thread_id, checkpoint_ns, "
                "channel, version, type, blob, base_version) SELECT %(thread_id)s, "
                "%(checkpoint_ns)s, x.t_channel, x.t_version, x.t_type, x.t_blob, x.t_base "
                f"FROM ({tails}) x WHERE EXISTS (SELECT 1 FROM cp) "
                f"ON CONFLICT DO NOTHING RETURNING {self.size('blob')} AS n)",
            )
        added = "(SELECT n FROM cp) - coalesce((SELECT n FROM prior), 0)"
        if tail_rows:
            added += " + coalesce((SELECT sum(n) FROM new_tails), 0)"
        if blob_rows:
            rows = rows_select_text(_BLOB_COLUMNS, blob_rows)
            ctes.append(
                f"new_blobs AS (INSERT INTO {self.blobs} (thread_id, checkpoint_ns, "
                "channel, version, type, blob) SELECT %(thread_id)s, %(checkpoint_ns)s, "
                f"x.channel, x.version, x.type, x.blob FROM ({rows}) x "
                "WHERE EXISTS (SELECT 1 FROM cp) "
                f"ON CONFLICT DO NOTHING RETURNING {self.size('blob')} AS n)",
            )
            added += " + coalesce((SELECT sum(n) FROM new_blobs), 0)"
        ctes.append(
            f"summary AS (INSERT INTO {self.threads} ({SUMMARY_COLUMNS}) "
            "SELECT CAST(%(thread_id)s AS text), CAST(%(head)s AS text), "
            "CASE WHEN EXISTS (SELECT 1 FROM prior) THEN 0 ELSE 1 END, "
            f"{added}, %(now)s, %(now)s WHERE EXISTS (SELECT 1 FROM cp) "
            + summary_merge(self)
            + ")"
        )
        done = "SELECT EXISTS (SELECT 1 FROM cp)"
        if tail_rows:
            done += ", (SELECT v FROM bases_ok)"
        return "WITH " + ", ".join(ctes) + " " + done

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
        params: dict[str, Any] = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "now": self.ts_param(now),
        }
        if task_name is not None:
            params["task_name"] = task_name
        rows_params(_WRITE_COLUMNS, rows, params)
        key = ("put_writes", len(rows), replace, task_name is not None)
        sql = self.sql(key, lambda: self._put_writes_sql(len(rows), replace, task_name is not None))
        return Op(_one(Stmt(sql, params)))

    def _put_writes_sql(self, count: int, replace: bool, named: bool) -> str:
        """The put_writes statement for `count` rows (`named`: the task stores its name)."""
        conflict = (
            "DO UPDATE SET task_path = EXCLUDED.task_path, channel = EXCLUDED.channel, "
            "type = EXCLUDED.type, blob = EXCLUDED.blob"
            if replace
            else "DO NOTHING"
        )
        # A named task (see `task_name`) also stores its name; every UUID id leaves the
        # column out, so the hot path's statement is the one it always was.
        named_column, named_value = "", ""
        if named:
            named_column, named_value = "task_name, ", "%(task_name)s::text, "
        # The seq of the checkpoint the writes are pending on (NULL while it is not stored).
        # Its id is matched as the one-entry range [id, id] in key order (equal, in a
        # deterministic collation), which only the primary key reads in that order: on fresh
        # tables, without statistics, the planner otherwise takes the parent index's
        # (thread, namespace) prefix as readily, reading every checkpoint of the namespace.
        seq = (
            f"SELECT c.seq FROM {self.checkpoints} c WHERE c.thread_id = %(thread_id)s "
            "AND c.checkpoint_ns = %(checkpoint_ns)s AND c.checkpoint_id >= %(checkpoint_id)s "
            "AND c.checkpoint_id <= %(checkpoint_id)s ORDER BY c.checkpoint_id LIMIT 1"
        )
        # Writes and thread summary in one statement. `prior` (the rows as they were) and
        # `ins` (what was inserted or replaced) give the bytes added exactly.
        return (
            f"WITH x AS ({rows_select_text(_WRITE_COLUMNS, count)}), "
            f"prior AS (SELECT w.idx, {self.size('w.blob')} AS n FROM {self.writes} w "
            "WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s "
            "AND w.checkpoint_id = %(checkpoint_id)s AND w.task_id = %(task_id)s::uuid "
            "AND w.idx IN (SELECT x.idx FROM x)), "
            f"ins AS (INSERT INTO {self.writes} (thread_id, checkpoint_ns, checkpoint_id, "
            f"task_id, {named_column}task_path, idx, channel, type, blob, seq) SELECT "
            "%(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s::uuid, "
            f"{named_value}%(task_path)s, x.idx, x.channel, x.type, x.blob, ({seq}) FROM x "
            f"ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict} "
            f"RETURNING idx, {self.size('blob')} AS n) "
            f"INSERT INTO {self.threads} ({SUMMARY_COLUMNS}) "
            "SELECT CAST(%(thread_id)s AS text), NULL, 0, "
            "coalesce((SELECT sum(n) FROM ins), 0) - coalesce((SELECT sum(prior.n) FROM prior "
            "WHERE prior.idx IN (SELECT idx FROM ins)), 0), %(now)s, %(now)s " + summary_merge(self)
        )

    def delete_keys(self, table: str, columns: Sequence[str], keys: list[tuple[Any, ...]]) -> Stmt:
        arrays = {f"k{i}": [k[i] for k in keys] for i in range(len(columns))}
        unnest = ", ".join(f"%(k{i})s::text[]" for i in range(len(columns)))
        names = ", ".join(columns)
        return Stmt(
            f"DELETE FROM {table} WHERE ({names}) IN (SELECT * FROM unnest({unnest}))",
            arrays,
        )

    def delete_thread_plan(self, thread_id: str) -> Op[None]:
        sql = (
            f"WITH c AS (DELETE FROM {self.checkpoints} WHERE thread_id = %(t)s), "
            f"w AS (DELETE FROM {self.writes} WHERE thread_id = %(t)s), "
            f"b AS (DELETE FROM {self.blobs} WHERE thread_id = %(t)s) "
            f"DELETE FROM {self.threads} WHERE thread_id = %(t)s"
        )
        return Op(_one(Stmt(sql, {"t": thread_id})))

    def copy_thread_plan(self, source: str, target: str) -> Op[None]:
        sql = (
            f"WITH c AS (INSERT INTO {self.checkpoints} (thread_id, checkpoint_ns, "
            "checkpoint_id, parent_checkpoint_id, run_id, checkpoint, metadata, pinned, seq, "
            "run_start) "
            "SELECT %(dst)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
            f"checkpoint, metadata, pinned, seq, run_start FROM {self.checkpoints} "
            "WHERE thread_id = %(src)s "
            "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
            "parent_checkpoint_id = EXCLUDED.parent_checkpoint_id, seq = EXCLUDED.seq, "
            "run_start = EXCLUDED.run_start, "
            + self.checkpoint_upsert_values()
            + f"), b AS (INSERT INTO {self.blobs} (thread_id, checkpoint_ns, channel, version, "
            "type, blob, base_version) SELECT %(dst)s, checkpoint_ns, channel, version, type, "
            f"blob, base_version FROM {self.blobs} WHERE thread_id = %(src)s "
            "ON CONFLICT DO NOTHING) "
            f"INSERT INTO {self.writes} (thread_id, checkpoint_ns, checkpoint_id, task_id, "
            "task_name, task_path, idx, channel, type, blob, seq) SELECT %(dst)s, checkpoint_ns, "
            f"checkpoint_id, task_id, task_name, task_path, idx, channel, type, blob, seq "
            f"FROM {self.writes} "
            "WHERE thread_id = %(src)s "
            "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE "
            "SET task_path = EXCLUDED.task_path, channel = EXCLUDED.channel, "
            "type = EXCLUDED.type, blob = EXCLUDED.blob"
        )

        def plan() -> Plan[None]:
            yield Stmt(sql, {"src": source, "dst": target})
            # A second statement: the summary must see the copied rows.
            yield from each(refresh_summaries_stmts(self, [target], datetime.now(UTC)))

        return Op(plan(), txn=True)

    def version_plan(self) -> Plan[str | None]:
        rows = yield Stmt(
            "SELECT to_regclass(%(name)s)::text", {"name": self.version_table}, fetch=True
        )
        if not rows or rows[0][0] is None:
            return None
        rows = yield Stmt(f"SELECT version_num FROM {self.version_table}", (), fetch=True)
        return rows[0][0] if rows else None

    def setup_plan(self) -> Plan[None]:
        """Run in one transaction holding an advisory lock: concurrent setups queue, and
        the later ones find the schema current. Plain CREATE INDEX only (never
        CONCURRENTLY, which cannot run in a transaction)."""
        yield Stmt("SELECT pg_advisory_xact_lock(%(key)s)", {"key": self.lock_key}, fetch=True)
        rows = yield Stmt(
            "SELECT 1 FROM pg_namespace WHERE nspname = %(s)s", {"s": self.schema}, fetch=True
        )
        if not rows:
            yield Stmt(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(self.schema)}", ())
        found = yield from self.version_plan()
        statements = plan_upgrade("postgresql", self.schema, found, where=self.describe())
        for sql in statements or ():
            yield Stmt(sql, None)


def _one(stmt: Stmt) -> Plan[None]:
    yield stmt
