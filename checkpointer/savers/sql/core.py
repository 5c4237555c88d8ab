"""The sans-I/O core shared by every SQL saver, sync and async.

Each saver operation is a *plan*: a generator that yields `Stmt`s and receives their rows.
A runner (`sync_exec` for sqlite3/psycopg, `async_exec` for aiosqlite/psycopg async) drives
it; nothing here touches a connection. The SQL text comes from a `Dialect`, which fills in the
few places SQLite and PostgreSQL differ (JSON access, arrays, placeholders, collation); the
statements and the row decoders are written once.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Generic, TypeVar

from checkpointer.errors import (
    CheckpointerError,
    ConfigError,
    CorruptValueError,
    SerializationError,
    ValueTooLarge,
)
from checkpointer.savers.base import (
    dumps_json,
    history_loop,
    metadata_counters_as_pairs,
    new_blob_channels,
    parent_id_for_put,
    resolve_now,
    validate_limit,
    validate_metadata_filter,
)
from checkpointer.savers.metadata import unescape_json_value
from checkpointer.savers.retention import delta_channels_of
from checkpointer.savers.sql.inline import RECORD_KEY as INLINE_KEY
from checkpointer.savers.sql.inline import (
    Inline,
    from_sql,
    inlinable,
    inline_probe,
    read_inline,
    serde_inlines,
    stored_form,
)
from checkpointer.savers.sql.record_seal import (
    SEAL_KEY,
    make_seal,
    record_verifier,
    verify_record,
)
from checkpointer.savers.sql.schema import THREADS
from checkpointer.serde import Serializer
from checkpointer.serde.located import ValueLocation, batch_loader, dumps_at, is_located, load_at
from checkpointer.types import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    RunnableConfig,
    checkpoint_id_of,
    checkpoint_ns_of,
    config_address,
    is_special_batch,
    make_config,
    thread_id_of,
    write_idx,
)

T = TypeVar("T")
Row = tuple[Any, ...]

MAX_CHANNELS_PER_QUERY = 62
"""Delta history tracks unseeded channels as bits of one signed 64-bit integer."""

MAX_STORED_VALUE_BYTES = 1_000_000_000
"""The most one stored value may hold, as serialized (after compression): SQLite's
default length limit, and under PostgreSQL's 1 GiB per field. Checked before any
statement, so a put over it raises ValueTooLarge with nothing written, instead of a
driver error from the middle of its transaction."""


def check_stored_sizes(rows: Iterable[tuple[str, str, bytes]], where: str) -> None:
    """ValueTooLarge for the first (channel, type, bytes) row over the limit."""
    limit = MAX_STORED_VALUE_BYTES
    for channel, _type, data in rows:
        if len(data) > limit:
            raise ValueTooLarge(len(data), limit, f"the value of channel {channel!r} {where}")


WALK_BOUND_REACHED = -1
"""Row kind of `delta_history_stmt` for a walk that reached its bound (see there)."""
WALK_RECORD = 3
"""A delta-walk row carrying a passed checkpoint's record, to verify its seal."""


@dataclass(frozen=True, slots=True)
class Stmt:
    """One statement for a runner: `many` runs it once per parameter set (executemany);
    `script` runs it to completion as a script (SQLite pragmas that work step by step,
    such as `incremental_vacuum`; no parameters)."""

    sql: str
    params: Any = ()
    fetch: bool = False
    many: bool = False
    script: bool = False


Plan = Generator[Stmt, list[Row], T]


@dataclass(slots=True)
class Op(Generic[T]):
    """A plan plus how to run it: `txn` asks for one write transaction around every
    statement (SQLite `BEGIN IMMEDIATE`; a PostgreSQL transaction block).

    `write` marks a single-statement write run without a transaction block: on SQLite it
    still queues behind this process's other writers instead of meeting SQLite's busy
    handler, which sleeps.

    `restart` builds the plan afresh. Only an op that is safe to run again from the start
    has one (see `repeatable`); an executor that lost its connection mid-op may re-run
    such an op on a new connection, and must never re-run any other.
    """

    plan: Plan[T]
    txn: bool = False
    restart: Callable[[], Plan[T]] | None = None
    write: bool = False


def repeatable(build: Callable[[], Op[T]]) -> Op[T]:
    """`build()`'s op, marked safe to repeat: a retry calls `build` again for a new plan.

    Mark only ops whose repetition is harmless even if the first run committed without
    the client hearing back (a connection lost during COMMIT): reads; the schema setup
    (one version-checked transaction); put and put_writes (upserts keyed by their ids,
    whose summary deltas are measured against the rows already there, so a repeat adds
    nothing). Deletes, prune, retention, copy, pin, TTL and maintenance stay unmarked: a
    repeat could undo or destroy what another writer did in between.
    """
    op = build()
    op.restart = lambda: build().plan
    return op


def read_plan(make: Callable[[], Plan[T]]) -> Op[T]:
    """A read-only plan built by `make`, safe to repeat."""
    return repeatable(lambda: Op(make()))


def read_op(stmt: Stmt) -> Op[list[Row]]:
    """A one-statement read, safe to repeat."""
    return read_plan(lambda: single(stmt))


def single(stmt: Stmt) -> Plan[list[Row]]:
    """A plan of one statement, returning its rows."""
    rows = yield stmt
    return rows


def each(stmts: Iterable[Stmt]) -> Plan[None]:
    """A plan running statements in order. (`yield from` a plain list would break: the
    runner sends rows back, and a list iterator cannot receive them.)"""
    for stmt in stmts:  # noqa: UP028
        yield stmt


# --------------------------------------------------------------------------- encoding
def encode_record(
    checkpoint: Checkpoint,
    inline: Mapping[str, Any] | None = None,
    seal: Callable[[Mapping[str, Any]], list[str]] | None = None,
) -> str:
    """The checkpoint minus its values (and its id, which is a column), as JSON text, with
    the small scalar values `inline` (see `inline.py`) if any, and the record's seal
    (`record_seal.py`) when `seal` is given."""
    record: dict[str, Any] = {
        k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")
    }
    if inline:
        record[INLINE_KEY] = inline
    try:
        if seal is not None:
            record[SEAL_KEY] = seal(record)
        return record_json(record)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"checkpoint record is not JSON-serializable: {exc}") from exc


def record_json(record: Mapping[str, Any]) -> str:
    """A checkpoint record as every write stores it: compact JSON in key order, except
    that inline values come first (SQLite's delta walk looks for them at the start of the
    text only, see `SqliteDialect.inline_has`)."""
    if INLINE_KEY in record:
        record = {INLINE_KEY: record[INLINE_KEY], **record}
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def encode_metadata(metadata: Mapping[str, Any]) -> str:
    return dumps_json(dict(metadata))


def _json_value(value: Any) -> Any:
    """jsonb comes back parsed (psycopg); SQLite gives text."""
    if isinstance(value, str | bytes):
        return json.loads(value)
    return value


Where = Mapping[str, str | None]
"""The location fields of a `CorruptValueError` (thread_id, checkpoint_ns, checkpoint_id)."""

_VERSION_TYPES = frozenset((str, int, float))
_STR = frozenset((str,))
_NO_WHERE: Where = {}


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "null" if value is None else "number"
    )


def _json_object(value: Any, what: str, where: Where) -> dict[str, Any]:
    """A JSON column as a dict, or CorruptValueError naming the record: the row was written
    around the saver (or damaged), and must not surface as a JSON or attribute error."""
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise CorruptValueError(f"{what} is not valid JSON ({exc})", **where) from exc
    if type(value) is not dict:
        raise CorruptValueError(f"{what} is not a JSON object (got {_json_type(value)})", **where)
    return value


def _is_versions(value: Any) -> bool:
    """A {channel: version} object (a version is a string or a number). The checks run in
    C (`map`, `issuperset`): these records are decoded on every read."""
    return type(value) is dict and _VERSION_TYPES.issuperset(map(type, value.values()))


def decode_metadata(value: Any, where: Where = _NO_WHERE) -> CheckpointMetadata:
    """The metadata column, checked for the one field the savers rely on (counters of the
    delta channels: an object of pairs); CorruptValueError otherwise. jsonb arrives parsed,
    with PostgreSQL's NUL escapes undone here (SQLite's text holds NUL as it is)."""
    if not isinstance(value, str | bytes):
        value = unescape_json_value(value)
    return metadata_counters_as_pairs(_json_object(value, "metadata", where), where)  # type: ignore[return-value]


def decode_checkpoint(
    record: Any,
    checkpoint_id: str,
    values: dict[str, Any],
    where: Where = _NO_WHERE,
    load_inline: Callable[[str, Any, Mapping[str, Any]], Any] | None = None,
    verify: Callable[[dict[str, Any]], None] | None = None,
) -> Checkpoint:
    """The checkpoint column plus its id and values: the value rows' `values` and the
    record's inline ones (read through `load_inline` when given). Type checks only, one
    level deep (on the hot path of every read): a record of the wrong shape is a
    CorruptValueError naming the field, not a TypeError somewhere in the runtime later."""
    fields = _json_object(record, "checkpoint record", where)
    if verify is not None:  # a located serializer: check (and drop) the record's seal
        verify(fields)
    elif SEAL_KEY in fields:
        del fields[SEAL_KEY]
    inline = read_inline(fields, where, load_inline)
    if inline:
        for channel, value in inline.items():
            values.setdefault(channel, value)
    versions = fields.setdefault("channel_versions", {})
    if not _is_versions(versions):
        raise CorruptValueError("checkpoint record channel_versions is malformed", **where)
    seen = fields.setdefault("versions_seen", {})
    if type(seen) is not dict or not all(map(_is_versions, seen.values())):
        raise CorruptValueError("checkpoint record versions_seen is malformed", **where)
    updated = fields.setdefault("updated_channels", None)
    if updated is not None and (
        type(updated) is not list or not _STR.issuperset(map(type, updated))
    ):
        raise CorruptValueError("checkpoint record updated_channels is malformed", **where)
    fields["id"] = checkpoint_id
    fields["channel_values"] = values
    return fields  # type: ignore[return-value]


def version_text(version: Any) -> str:
    """The text form of a channel version, as the blob key stores it."""
    return str(version)


# --------------------------------------------------------------------------- dialect
class Dialect:
    """SQL fragments that differ between SQLite and PostgreSQL; everything else is shared."""

    name: str = ""
    checkpoints: str = ""
    blobs: str = ""
    writes: str = ""
    threads: str = ""

    def lookup(self, table: str, alias: str, columns: str, condition: str) -> str:
        """Join `table` as a per-row primary-key lookup, whatever the planner estimates:
        SQLite runs CROSS JOIN in the written order; PostgreSQL needs LATERAL. Otherwise a
        planner may scan the whole thread once per row (or hash-join it)."""
        return f"CROSS JOIN {table} {alias} ON {condition}"

    _sql_cache: dict[tuple[Any, ...], str]

    def sql(self, key: tuple[Any, ...], build: Callable[[], str]) -> str:
        """Statement text built once per shape: only parameters vary between calls."""
        try:
            cache = self._sql_cache
        except AttributeError:
            cache = self._sql_cache = {}
        text = cache.get(key)
        if text is None:
            text = cache[key] = build()
        return text

    def p(self, name: str) -> str:
        """A named placeholder."""
        raise NotImplementedError

    def bigint(self, expr: str) -> str:
        return expr

    def text(self, expr: str) -> str:
        """An expression typed as text (PostgreSQL cannot infer a bare parameter's type)."""
        return expr

    def null(self, kind: str) -> str:
        """A typed NULL: the first branch of a UNION fixes each column's type."""
        return "NULL"

    def json_param(self, name: str) -> str:
        """A placeholder for JSON text going into a JSON column."""
        return self.p(name)

    def task_id_param(self, name: str) -> str:
        return self.p(name)

    def task_id_text(self, column: str) -> str:
        return column

    def encode_task_id(self, task_id: str) -> Any:
        """The stored form of a task id: the ONE place that conversion happens."""
        raise NotImplementedError

    def encode_write_key(self, task_id: str, idx: int) -> tuple[Any, int]:
        """The stored `(task_id, idx)` of a write; `decode_write_key` inverts it exactly."""
        return self.encode_task_id(task_id), idx

    def decode_write_key(self, stored_task_id: Any, stored_idx: int) -> tuple[str, int]:
        return str(stored_task_id), int(stored_idx)

    def task_name(self, task_id: str) -> str | None:
        """What the writes table's `task_name` holds for `task_id`: where the task id
        column holds every id as it is (SQLite's text), nothing."""
        return None

    def versions_join(self, record: str, alias: str) -> str:
        """A FROM fragment listing `record`'s channel_versions as rows (`alias`.key, .value)."""
        raise NotImplementedError

    def versions_value(self, alias: str) -> str:
        return f"{alias}.value"

    def version_of(self, record: str, channel: str) -> str:
        """The version text of `channel` (an SQL expression) in a checkpoint record."""
        raise NotImplementedError

    def versions_column(self, record: str) -> str:
        """The channel_versions object of a record, as the driver returns JSON."""
        raise NotImplementedError

    def may_hold_version(self, record: str, version: str) -> str | None:
        """A cheap test that is false only when `record` cannot hold the version text
        `version` (an SQL expression), or None where reading the version is cheap already.

        The delta-history walk asks it at every ancestor before parsing the record's JSON:
        over a long chain the parse, not the primary-key chase, is what costs."""
        return None

    def inline_has(self, record: str, channel: str, probe: str) -> str:
        """Whether `record` keeps the value of `channel` (an SQL expression) inline.
        `probe` is a parameter holding `inline_probe(channel)`, for a cheap first test."""
        raise NotImplementedError

    def record_has_inline(self, record: str) -> str:
        """Whether `record` may keep values inline (cheap; false only when it does not)."""
        raise NotImplementedError

    def inline_keys_column(self, record: str) -> str:
        """A JSON array of the channels `record` keeps inline (NULL if none)."""
        raise NotImplementedError

    def inline_value(self, record: str, channel: str) -> tuple[str, str]:
        """(JSON type, value as text) of `channel`'s inline value in `record`, as two SQL
        expressions; `inline.from_sql` turns them back into the value."""
        raise NotImplementedError

    json_guarded = False
    """Whether JSON reads tolerate damaged records (a `guarded()` copy)."""

    def guarded(self) -> Dialect:
        """This dialect with JSON reads that tolerate a damaged checkpoint record (text
        that is not JSON, a non-object where an object belongs), so that one such row does
        not abort a statement reading others: its decoder then names it. Only used to
        retry a read that failed on one (`json_damage`): the statements of the hot path
        stay as they are."""
        clone: Dialect | None = self.__dict__.get("_guarded_copy")
        if clone is None:
            clone = copy.copy(self)
            clone.__dict__.pop("_sql_cache", None)
            clone.json_guarded = True
            self._guarded_copy = clone
        return clone

    def json_damage(self, exc: BaseException) -> bool:
        """Whether a statement failed on a damaged JSON record (then retry `guarded()`)."""
        return False

    def damaged_record_probe(self, record: str) -> str | None:
        """An always-false condition that makes the statement fail, as parsing would, on a
        record that is not JSON; None where not needed (see `may_hold_version`)."""
        return None

    def record_unreadable(self, record: str) -> str | None:
        """A condition true where a checkpoint record's channel versions cannot be read
        (guarded dialects; None: no check in the statement)."""
        return None

    def counters_column(self, column: str) -> str:
        """The metadata's counters_since_delta_snapshot object, as the driver returns JSON."""
        raise NotImplementedError

    def in_list(self, column: str, name: str) -> str:
        raise NotImplementedError

    def list_param(self, values: Sequence[Any]) -> Any:
        raise NotImplementedError

    def metadata_filter(self, column: str, key_name: str, value_name: str, value: Any) -> str:
        """SQL true where the metadata's value at the bound path `key_name` is JSON-equal
        (`checkpointer.savers.metadata`) to the bound `value_name`; the text may depend on
        the filter value's JSON type, never on the value itself."""
        raise NotImplementedError

    def metadata_filter_params(self, key: str, value: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def check_metadata(self, text: str) -> str:
        """Metadata JSON text as the metadata column stores it (PostgreSQL jsonb cannot
        hold NUL: see `metadata.escape_json_text`)."""
        return text

    def typed(self, expr: str, kind: str) -> str:
        """An expression cast to `kind` (text, float, bigint, int, ts, bool) where the
        database cannot infer a bare parameter's type (PostgreSQL); as is elsewhere."""
        return expr

    def ts_param(self, when: datetime) -> Any:
        """A timestamp as the summary table stores it."""
        raise NotImplementedError

    def decode_ts(self, value: Any) -> datetime | None:
        raise NotImplementedError

    def add_seconds(self, ts: str, seconds: str) -> str:
        """SQL for the timestamp `ts` plus `seconds` (both SQL expressions)."""
        raise NotImplementedError

    def size(self, column: str, *, text: bool = False) -> str:
        """Stored payload bytes of a value column (`text=True`: UTF-8 bytes of a JSON/text
        column). The one definition of "bytes" the summaries and reports use."""
        raise NotImplementedError

    def json_field(self, column: str, key: str) -> str:
        """A top-level field of a JSON column as text (`key` is a constant of ours)."""
        raise NotImplementedError

    def ids_table(self, name: str) -> str:
        """A subquery with one row (column `tid`) per value of the list parameter `name`."""
        raise NotImplementedError

    def lock_thread(self, thread_id: str) -> Stmt | None:
        """A statement that makes concurrent writers of the thread wait until the current
        transaction ends (None where the transaction already excludes them: SQLite's
        BEGIN IMMEDIATE)."""
        return None

    def insert_blobs(self, thread_id: str, rows: list[tuple[str, str, str, str, bytes]]) -> Stmt:
        """Insert (ns, channel, version, type, blob) rows that do not exist yet."""
        raise NotImplementedError

    def checkpoint_upsert_values(self) -> str:
        """The SET list when a checkpoint is written again."""
        return (
            "checkpoint = excluded.checkpoint, metadata = excluded.metadata, "
            "run_id = excluded.run_id"
        )

    # Statements whose shape differs (bulk inserts) are built by the dialect.
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
    ) -> Op[None]:
        """Blobs, the checkpoint and the thread summary, in one transaction."""
        raise NotImplementedError

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
        """The writes and the thread summary, in one transaction (`task_name`: see
        `Dialect.task_name`)."""
        raise NotImplementedError

    def delete_keys(self, table: str, columns: Sequence[str], keys: list[tuple[Any, ...]]) -> Stmt:
        raise NotImplementedError

    def delete_thread_plan(self, thread_id: str) -> Op[None]:
        raise NotImplementedError

    def copy_thread_plan(self, source: str, target: str) -> Op[None]:
        raise NotImplementedError

    # Schema management.
    def version_plan(self) -> Plan[str | None]:
        raise NotImplementedError

    def setup_plan(self) -> Plan[None]:
        raise NotImplementedError

    def file_setup_plan(self) -> Plan[None] | None:
        """Settings of the database file itself, run by `setup()` before `setup_plan` and
        outside its transaction (SQLite: WAL, incremental auto-vacuum). None when the
        backend has none. Never run on an ordinary connection: changing them takes the
        write lock, which a read must never need."""
        return None

    def describe(self) -> str:
        """Names the database in errors."""
        return self.name


# --------------------------------------------------------------------------- reads
_TUPLE_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata"
)


def _tuples_sql(d: Dialect, page_sql: str) -> str:
    """Checkpoints selected by `page_sql` (which also selects `page_limit`), their blobs
    and their pending writes, in one statement: a UNION ALL of three row kinds, see
    `decode_tuples`. Each checkpoint gets a number, `k`, in page order; its blob and write
    rows carry only that, not its three key strings. Unordered: sorting would push every
    value through a temporary B-tree (a whole chat history per checkpoint);
    `decode_tuples` groups the rows instead."""
    return (
        "WITH t AS MATERIALIZED (SELECT q.*, row_number() OVER (ORDER BY q.checkpoint_id DESC, "
        f"q.thread_id DESC, q.checkpoint_ns DESC) AS k FROM ({page_sql}) q) "
        "SELECT t.k, 0 AS kind, t.thread_id AS a, t.checkpoint_ns AS b, t.checkpoint_id AS c, "
        f"t.parent_checkpoint_id AS d, {d.typed('t.page_limit', 'bigint')} AS n, "
        f"{d.null('bytes')} AS data, t.checkpoint AS rec, t.metadata AS meta FROM t "
        "UNION ALL "
        f"SELECT t.k, 1, bl.channel, {d.versions_value('v')}, NULL, bl.type, NULL, bl.blob, "
        f"NULL, NULL FROM t {d.versions_join('t.checkpoint', 'v')} "
        + d.lookup(
            d.blobs,
            "bl",
            "bl.channel, bl.type, bl.blob",
            "bl.thread_id = t.thread_id AND bl.checkpoint_ns = t.checkpoint_ns "
            f"AND bl.channel = v.key AND bl.version = {d.versions_value('v')}",
        )
        + " "
        "UNION ALL "
        f"SELECT t.k, 2, w.task_path, {d.task_id_text('w.task_id')}, w.channel, w.type, "
        "w.idx, w.blob, NULL, NULL FROM t "
        + d.lookup(
            d.writes,
            "w",
            "w.task_path, w.task_id, w.task_name, w.channel, w.type, w.idx, w.blob",
            "w.thread_id = t.thread_id AND w.checkpoint_ns = t.checkpoint_ns "
            "AND w.checkpoint_id = t.checkpoint_id",
        )
    )


def get_tuple_stmt(d: Dialect, config: RunnableConfig) -> Stmt:
    thread_id, ns, checkpoint_id = config_address(config)
    params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        params["checkpoint_id"] = checkpoint_id

    def build() -> str:
        page = (
            f"SELECT {_TUPLE_COLUMNS}, 1 AS page_limit FROM {d.checkpoints} "
            f"WHERE thread_id = {d.p('thread_id')} AND checkpoint_ns = {d.p('checkpoint_ns')} "
        )
        if checkpoint_id is None:
            page += "ORDER BY checkpoint_id DESC LIMIT 1"
        else:
            page += f"AND checkpoint_id = {d.p('checkpoint_id')}"
        return _tuples_sql(d, page)

    return Stmt(d.sql(("get_tuple", checkpoint_id is None), build), params, fetch=True)


@dataclass(slots=True)
class ListQuery:
    """`list()` arguments, validated once and turned into WHERE clauses per page."""

    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None
    before_id: str | None = None
    filter: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None

    @classmethod
    def from_args(
        cls,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> ListQuery:
        query = cls(filter=validate_metadata_filter(filter))
        if config is not None:
            query.thread_id = thread_id_of(config)
            if "checkpoint_ns" in config["configurable"]:
                query.checkpoint_ns = checkpoint_ns_of(config)
            query.checkpoint_id = checkpoint_id_of(config)
        if before is not None:
            query.before_id = checkpoint_id_of(before)
        query.limit = validate_limit(limit)
        return query


LIST_PAGE_BYTES = 64 * 1024 * 1024
"""About the most one `list()` page holds in values: pages are bounded by bytes as well
as by `page_size`. A thread that fits is listed in one statement, whatever its checkpoint
count (a long thread of small checkpoints costs one round trip, not one per `page_size`);
a bigger one in pages of as many checkpoints as fit. What a checkpoint weighs comes from
the thread summary (stored bytes per checkpoint) and from the values the thread's head
references (a large value shared by every checkpoint is in every one of them); across
threads, from all summaries."""


def _least(a: str, b: str) -> str:
    return f"(CASE WHEN {a} < {b} THEN {a} ELSE {b} END)"


def _greatest(a: str, b: str) -> str:
    return f"(CASE WHEN {a} > {b} THEN {a} ELSE {b} END)"


def list_page_stmt(
    d: Dialect,
    query: ListQuery,
    after: tuple[str, str, str] | None,
    page_size: int,
    remaining: int | None = None,
) -> Stmt:
    """One page of `list()`, newest first; `after` is the last (id, thread, ns) seen.

    The page holds at most `page_size` checkpoints and about `LIST_PAGE_BYTES` of values
    (at least one checkpoint), or a whole thread that fits in that many bytes (per its
    summary row) up to `remaining`. Each checkpoint row carries the limit the page used
    (`page_limit_of`), so the caller knows when it is the last page."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": page_size}
    if query.thread_id is not None:
        where.append(f"thread_id = {d.p('thread_id')}")
        params["thread_id"] = query.thread_id
    if query.checkpoint_ns is not None:
        where.append(f"checkpoint_ns = {d.p('checkpoint_ns')}")
        params["checkpoint_ns"] = query.checkpoint_ns
    if query.checkpoint_id is not None:
        where.append(f"checkpoint_id = {d.p('checkpoint_id')}")
        params["checkpoint_id"] = query.checkpoint_id
    if query.before_id is not None:
        where.append(f"checkpoint_id < {d.p('before_id')}")
        params["before_id"] = query.before_id
    if after is not None:
        where.append(
            "(checkpoint_id, thread_id, checkpoint_ns) < "
            f"({d.p('after_id')}, {d.p('after_thread')}, {d.p('after_ns')})"
        )
        params["after_id"], params["after_thread"], params["after_ns"] = after
    for i, (key, value) in enumerate(query.filter.items()):
        key_param, value_param = d.metadata_filter_params(key, value)
        params[f"fk{i}"], params[f"fv{i}"] = key_param, value_param
        where.append(d.metadata_filter("metadata", f"fk{i}", f"fv{i}", value))

    whole_thread = query.thread_id is not None
    params["page_bytes"] = LIST_PAGE_BYTES
    if whole_thread:
        params["cap"] = remaining if remaining is not None else 2**62

    def build() -> str:
        limit = d.typed(d.p("limit"), "bigint")
        page_bytes = d.typed(d.p("page_bytes"), "bigint")
        if whole_thread:
            # What one checkpoint weighs: the thread's average, or what its head's values
            # weigh if more (a value every checkpoint shares counts in every one).
            head = (
                f"(SELECT coalesce(sum({d.size('hb.blob')}), 0) FROM {d.checkpoints} h "
                f"{d.versions_join('h.checkpoint', 'hv')} JOIN {d.blobs} hb ON "
                "hb.thread_id = h.thread_id AND hb.checkpoint_ns = h.checkpoint_ns AND "
                f"hb.channel = hv.key AND hb.version = {d.versions_value('hv')} WHERE "
                f"h.thread_id = {d.p('thread_id')} AND h.checkpoint_ns = '' AND "
                "h.checkpoint_id = s.head_checkpoint_id)"
            )
            weight = _greatest(
                _greatest("(s.bytes / " + _greatest("s.checkpoint_count", "1") + ")", head), "1"
            )
            # One more than the summary's count: a whole thread then comes back short of the
            # limit and ends the listing; a stale count only costs another page.
            cap = d.typed(d.p("cap"), "bigint")
            limit = (
                "coalesce((SELECT CASE WHEN z.fit >= z.n THEN (CASE WHEN z.n > "
                f"{limit} THEN {_least('z.n', cap)} ELSE {limit} END) "
                f"ELSE {_greatest('1', _least('z.fit', limit))} END FROM (SELECT "
                f"s.checkpoint_count + 1 AS n, {page_bytes} / {weight} AS fit "
                f"FROM {d.threads} s WHERE s.thread_id = {d.p('thread_id')}) z), {limit})"
            )
        else:
            count = _greatest("coalesce(sum(a.checkpoint_count), 0)", "1")
            everyone = f"(SELECT coalesce(sum(a.bytes), 0) / {count} FROM {d.threads} a)"
            limit = _greatest("1", _least(f"({page_bytes} / {_greatest(everyone, '1')})", limit))
        page = f"SELECT {_TUPLE_COLUMNS}, {limit} AS page_limit FROM {d.checkpoints}"
        if where:
            page += " WHERE " + " AND ".join(where)
        page += " ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC "
        page += f"LIMIT {limit}"
        return _tuples_sql(d, page)

    # The WHERE clauses are fixed text per shape; every value in them is a parameter.
    return Stmt(d.sql(("list", whole_thread, *where), build), params, fetch=True)


def page_limit_of(rows: Sequence[Row]) -> int | None:
    """The checkpoint limit a page of `list_page_stmt` used (None: the page is empty)."""
    for row in rows:
        if row[1] == 0:
            return int(row[6])
    return None


def decode_tuples(rows: Iterable[Row], serde: Serializer, d: Dialect) -> Iterator[CheckpointTuple]:
    """Rows of `_tuples_sql` to tuples, newest first, one at a time: a checkpoint that
    cannot be read raises only when it is reached, so `list()` still yields every newer one
    first.

    Row: (k, kind, a, b, c, d, n, data, rec, meta): `k` numbers the checkpoint in the page;
    kind 0 is the checkpoint (a, b, c = thread, ns, id; d = parent id; n = page limit), 1 a
    blob (a = channel, b = version, d = type), 2 a pending write (a = task_path, b = task_id,
    c = channel, d = type, n = idx). The rows come in any order: they are grouped per
    checkpoint here, writes in the order they were applied.
    """
    heads: list[Row] = []
    blobs_of: dict[int, list[Row]] = {}
    writes_of: dict[int, list[Row]] = {}
    for row in rows:
        kind = row[1]
        if kind == 0:
            heads.append(row)
            continue
        groups = blobs_of if kind == 1 else writes_of
        group = groups.get(row[0])
        if group is None:
            groups[row[0]] = [row]
        else:
            group.append(row)
    heads.sort(key=_page_order)
    located = is_located(serde)
    # Values decode through the batch loader when there is one; a value it cannot read
    # goes through `read`, which names where the value is.
    fast = batch_loader(serde)
    read = partial(load_at, serde)
    none: list[Row] = []
    takes_inline = serde_inlines(serde)

    for head in heads:
        thread_id, ns, checkpoint_id, parent_id = head[2], head[3], head[4], head[5]
        where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        blob_rows = blobs_of.get(head[0], none)
        write_rows = writes_of.get(head[0], none)
        values: dict[str, Any] = {}
        if len(blob_rows) > 1:
            blob_rows.sort(key=_by_channel)
        for row in blob_rows:
            channel, version = row[2], row[3]
            data = (row[5], row[7] if type(row[7]) is bytes else bytes(row[7]))
            if fast is not None:
                try:
                    values[channel] = fast(data)
                    continue
                except Exception:
                    pass
            values[channel] = read(
                data,
                ValueLocation.blob(thread_id, ns, channel, version) if located else None,
                **where,
                channel=channel,
                version=version,
            )
        writes: list[PendingWrite] = []
        if len(write_rows) > 1:
            write_rows.sort(key=_applied_order)
        for row in write_rows:
            task_id, idx = d.decode_write_key(row[3], row[6])
            channel = row[4]
            data = (row[5], row[7] if type(row[7]) is bytes else bytes(row[7]))
            value = _write_value(
                fast, read, located, data, thread_id, ns, checkpoint_id, task_id, idx, channel
            )
            writes.append((task_id, channel, value))
        yield CheckpointTuple(
            config=make_config(thread_id, ns, checkpoint_id),
            checkpoint=decode_checkpoint(
                head[8],
                checkpoint_id,
                values,
                where,
                None if takes_inline else inline_loader(serde, thread_id, ns, where),
                record_verifier(serde, thread_id, ns, checkpoint_id, parent_id)
                if located
                else None,
            ),
            metadata=decode_metadata(head[9], where),
            parent_config=(
                make_config(thread_id, ns, parent_id) if parent_id is not None else None
            ),
            pending_writes=writes,
        )


def inline_loader(
    serde: Serializer, thread_id: str, ns: str, where: Where
) -> Callable[[str, Any, Mapping[str, Any]], Any]:
    """Reads a record's inline values through a serializer that does not keep values
    inline (encryption): each as the value row it stands for, at that row's location, so a
    serializer refusing plaintext refuses it."""
    located = is_located(serde)

    def load(channel: str, value: Any, versions: Mapping[str, Any]) -> Any:
        version = version_text(versions.get(channel))
        location = ValueLocation.blob(thread_id, ns, channel, version) if located else None
        return load_at(serde, stored_form(value), location, **where, channel=channel)

    return load


def _page_order(row: Row) -> int:
    return int(row[0])


def _by_channel(row: Row) -> str:
    return str(row[2])


def _applied_order(row: Row) -> tuple[str, str, int]:
    """(task_path, stored task id, stored idx): the order the runtime applied them in."""
    return (row[2], row[3], row[6])


# --------------------------------------------------------------------------- delta history
def delta_history_stmt(
    d: Dialect,
    config: RunnableConfig,
    channels: Sequence[str],
    bound: int | None = None,
    records: bool = False,
) -> Stmt:
    """Seeds and writes for up to 62 channels in one recursive statement.

    The walk follows parent pointers from the target (never id order), carrying a bitmask of
    channels still looking for a stored value: `mask_in` on entering an ancestor (whose
    writes count for those channels), `mask_out` after it (minus the channels it stores a
    value for). It stops when `mask_out` is 0 or the root is passed. The target row itself
    enters with 0, so its own writes and values are ignored.

    The walk is bounded by the thread's checkpoint count (its summary row's, or `bound`):
    a walk without a loop visits each checkpoint at most once, so one that gets that deep
    has come back to a checkpoint it passed, and stops there, on the server, with one
    `WALK_BOUND_REACHED` row (first in the result) naming where. A stale summary can
    only make that a false alarm, which `confirm_walk_loop` tells apart.

    With `records` (a serializer that seals records, `record_seal.py`), the result ends with
    one `WALK_RECORD` row per checkpoint the walk passed (ref = its id, ikind = its parent
    id, itext = its record), so that every record whose versions or parent steered the
    walk is verified.
    """
    if len(channels) > MAX_CHANNELS_PER_QUERY:
        raise ValueError(f"at most {MAX_CHANNELS_PER_QUERY} channels per statement")
    thread_id, ns, checkpoint_id = config_address(config)
    p = d.p
    params: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "full": (1 << len(channels)) - 1,
        "bound": bound,
    }
    if checkpoint_id is not None:
        params["checkpoint_id"] = checkpoint_id
    for i, ch in enumerate(channels):
        params[f"ch{i}"] = ch
        params[f"ik{i}"] = inline_probe(ch)
    n = len(channels)

    def build() -> str:
        # Per thread, not namespace: an upper bound either way. A thread without a
        # summary row (written before summaries existed) counts its namespace's rows.
        limit = (
            f"coalesce({d.typed(p('bound'), 'bigint')}, (SELECT s.checkpoint_count FROM "
            f"{d.threads} s WHERE s.thread_id = {p('thread_id')}), (SELECT count(*) FROM "
            f"{d.checkpoints} c WHERE c.thread_id = {p('thread_id')} "
            f"AND c.checkpoint_ns = {p('checkpoint_ns')}))"
        )
        target = (
            f"SELECT checkpoint_id, parent_checkpoint_id, {limit} AS bound FROM {d.checkpoints} "
            f"WHERE thread_id = {p('thread_id')} AND checkpoint_ns = {p('checkpoint_ns')} "
        )
        if checkpoint_id is None:
            target += "ORDER BY checkpoint_id DESC LIMIT 1"
        else:
            target += f"AND checkpoint_id = {p('checkpoint_id')}"

        def lookup_pc(checkpoint_id: str) -> str:
            return (
                f"pc.thread_id = {p('thread_id')} AND pc.checkpoint_ns = {p('checkpoint_ns')} "
                f"AND pc.checkpoint_id = {checkpoint_id}"
            )

        def stored_at(record: str, i: int) -> str:
            exact = (
                f"EXISTS (SELECT 1 FROM {d.blobs} sb WHERE sb.thread_id = {p('thread_id')} "
                f"AND sb.checkpoint_ns = {p('checkpoint_ns')} AND sb.channel = {p(f'ch{i}')} "
                f"AND sb.version = {d.version_of(record, p(f'ch{i}'))})"
            )
            maybe = d.may_hold_version(record, "sv.version")
            if maybe is None:
                return f"({exact} OR {d.inline_has(record, p(f'ch{i}'), p(f'ik{i}'))})"
            # Only the channel's few stored versions (snapshots) can end the walk: skip the
            # JSON parse at ancestors whose record mentions none of them. The record is then
            # never parsed, so a cheap probe still fails the statement on a damaged one (as
            # the parse would have), and the guarded retry names it.
            prefiltered = (
                f"EXISTS (SELECT 1 FROM {d.blobs} sv WHERE sv.thread_id = {p('thread_id')} "
                f"AND sv.checkpoint_ns = {p('checkpoint_ns')} AND sv.channel = {p(f'ch{i}')} "
                f"AND {maybe}) AND {exact}"
            )
            probe = d.damaged_record_probe(record)
            stored = prefiltered if probe is None else f"({probe} OR {prefiltered})"
            # A small scalar stored inline is a stored value too (see `inline.py`).
            return f"({stored} OR {d.inline_has(record, p(f'ch{i}'), p(f'ik{i}'))})"

        seeded_bits = " + ".join(
            f"(CASE WHEN (w.mask_out & {d.bigint(str(1 << i))}) <> 0 AND "
            f"{stored_at('pc.checkpoint', i)} THEN {d.bigint(str(1 << i))} ELSE 0 END)"
            for i in range(n)
        )
        chans = " UNION ALL ".join(
            f"SELECT {d.bigint(str(1 << i))} AS bit, {p(f'ch{i}')} AS name" for i in range(n)
        )

        def inline_seed(i: int) -> str:
            kind, text = d.inline_value("pc.checkpoint", p(f"ch{i}"))
            return (
                f"SELECT 0, w.depth, {d.text(p(f'ch{i}'))}, NULL, NULL, NULL, NULL, NULL, "
                f"{d.version_of('pc.checkpoint', p(f'ch{i}'))}, {kind}, {text} FROM walk w "
                + d.lookup(d.checkpoints, "pc", "pc.checkpoint", lookup_pc("w.checkpoint_id"))
                + f" WHERE (w.mask_in & {d.bigint(str(1 << i))}) <> 0 "
                f"AND (w.mask_out & {d.bigint(str(1 << i))}) = 0 "
                f"AND {d.inline_has('pc.checkpoint', p(f'ch{i}'), p(f'ik{i}'))}"
            )

        seeds = " UNION ALL ".join(
            f"SELECT 0 AS kind, w.depth AS depth, {d.text(p(f'ch{i}'))} AS channel, "
            f"{d.null('text')} AS task_path, {d.null('text')} AS task_id, "
            f"{d.null('int')} AS idx, bl.type AS type, bl.blob AS blob, bl.version AS ref, "
            f"{d.null('text')} AS ikind, {d.null('text')} AS itext "
            "FROM walk w "
            + d.lookup(d.checkpoints, "pc", "pc.checkpoint", lookup_pc("w.checkpoint_id"))
            + " "
            + d.lookup(
                d.blobs,
                "bl",
                "bl.type, bl.blob, bl.version",
                f"bl.thread_id = {p('thread_id')} AND bl.checkpoint_ns = {p('checkpoint_ns')} "
                f"AND bl.channel = {p(f'ch{i}')} "
                f"AND bl.version = {d.version_of('pc.checkpoint', p(f'ch{i}'))}",
            )
            + " "
            f"WHERE (w.mask_in & {d.bigint(str(1 << i))}) <> 0 "
            f"AND (w.mask_out & {d.bigint(str(1 << i))}) = 0"
            for i in range(n)
        )
        seeds += " UNION ALL " + " UNION ALL ".join(inline_seed(i) for i in range(n))
        sql = (
            f"WITH RECURSIVE chans AS ({chans}), "
            f"target AS ({target}), "
            "walk(checkpoint_id, parent_id, depth, mask_in, mask_out) AS ("
            f"SELECT checkpoint_id, parent_checkpoint_id, 0, {d.bigint('0')}, "
            f"{d.bigint(p('full'))} FROM target "
            "UNION ALL "
            "SELECT pc.checkpoint_id, pc.parent_checkpoint_id, w.depth + 1, w.mask_out, "
            f"w.mask_out - ({seeded_bits}) "
            "FROM walk w "
            + d.lookup(
                d.checkpoints,
                "pc",
                "pc.checkpoint_id, pc.parent_checkpoint_id, pc.checkpoint",
                lookup_pc("w.parent_id"),
            )
            + " "
            "WHERE w.mask_out <> 0 AND w.depth < (SELECT bound FROM target)) "
            f"SELECT {WALK_BOUND_REACHED}, w.depth, {d.null('text')}, {d.null('text')}, "
            f"{d.null('text')}, {d.null('int')}, {d.null('text')}, {d.null('bytes')}, "
            f"w.checkpoint_id, {d.null('text')}, {d.null('text')} FROM walk w "
            "WHERE w.depth >= (SELECT bound FROM target) "
            f"UNION ALL {seeds} "
            "UNION ALL "
            "SELECT 1, w.depth, wr.channel, wr.task_path, "
            f"{d.task_id_text('wr.task_id')}, wr.idx, wr.type, wr.blob, w.checkpoint_id, "
            "NULL, NULL "
            "FROM walk w "
            + d.lookup(
                d.writes,
                "wr",
                "wr.task_path, wr.task_id, wr.task_name, wr.channel, wr.type, wr.idx, wr.blob",
                f"wr.thread_id = {p('thread_id')} AND wr.checkpoint_ns = {p('checkpoint_ns')} "
                "AND wr.checkpoint_id = w.checkpoint_id",
            )
            + " "
            "JOIN chans ON chans.name = wr.channel AND (w.mask_in & chans.bit) <> 0 "
        )
        unreadable = d.record_unreadable("pc.checkpoint")
        if unreadable is not None:
            # Ancestors whose record cannot be read: the walk could not see their values.
            sql += (
                "UNION ALL SELECT 2, w.depth, NULL, NULL, NULL, NULL, NULL, NULL, "
                "w.checkpoint_id, NULL, NULL FROM walk w "
                + d.lookup(d.checkpoints, "pc", "pc.checkpoint", lookup_pc("w.checkpoint_id"))
                + f" WHERE w.depth > 0 AND {unreadable} "
            )
        if records:
            sql += (
                f"UNION ALL SELECT {WALK_RECORD}, w.depth, NULL, NULL, NULL, NULL, NULL, NULL, "
                f"w.checkpoint_id, w.parent_id, {d.text('pc.checkpoint')} FROM walk w "
                + d.lookup(d.checkpoints, "pc", "pc.checkpoint", lookup_pc("w.checkpoint_id"))
                + " "
            )
        sql += "ORDER BY 1, 2 DESC, 4, 5, 6"
        return sql

    sql = d.sql(("delta", n, checkpoint_id is None, records), build)
    return Stmt(sql, params, fetch=True)


def parent_pointers_stmt(d: Dialect, thread_id: str, ns: str) -> Stmt:
    """Every (checkpoint id, parent id) of a namespace: ids only, read only to tell a loop
    from a stale summary after a walk reached its bound."""
    return Stmt(
        f"SELECT checkpoint_id, parent_checkpoint_id FROM {d.checkpoints} "
        f"WHERE thread_id = {d.p('thread_id')} AND checkpoint_ns = {d.p('checkpoint_ns')}",
        {"thread_id": thread_id, "checkpoint_ns": ns},
        fetch=True,
    )


def confirm_walk_loop(rows: Sequence[Row], thread_id: str, ns: str, start: str | None) -> int:
    """Walk the parent pointers of `parent_pointers_stmt` from `start` (None: the head):
    CorruptHistoryError at the first checkpoint seen twice; else (the summary undercounted)
    the exact bound to walk again with."""
    parent_of = {str(cid): None if pid is None else str(pid) for cid, pid in rows}
    cursor = start if start is not None else max(parent_of, default=None)
    seen: set[str] = set()
    while cursor is not None and cursor in parent_of:
        if cursor in seen:
            raise history_loop(thread_id, ns, cursor)
        seen.add(cursor)
        cursor = parent_of[cursor]
    return len(parent_of)


def decode_delta_history(
    rows: Iterable[Row],
    channels: Sequence[str],
    serde: Serializer,
    d: Dialect,
    *,
    thread_id: str,
    checkpoint_ns: str,
) -> dict[str, DeltaChannelHistory]:
    """Rows (kind, depth, channel, task_path, task_id, idx, type, blob, ref, ikind, itext),
    seeds first, then writes oldest first, to one history per channel. `ref` is a seed's
    version and the checkpoint a write is pending on: each value is read at the location
    it was stored at, not the target's. A seed kept inline in its record comes as (ikind,
    itext), see `inline.from_sql`. A kind 2 row is an ancestor whose record is unreadable."""
    out: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
    located = is_located(serde)
    fast = batch_loader(serde)  # as in `decode_tuples`
    read = partial(load_at, serde)
    takes_inline = serde_inlines(serde)
    for row in rows:
        kind, _depth, channel, _path, stored_task_id, stored_idx, type_, blob, ref = row[:9]
        if kind == WALK_BOUND_REACHED:  # never decode a walk cut short (see the statement)
            raise history_loop(thread_id, checkpoint_ns, str(ref))
        if kind == WALK_RECORD:
            fields = _json_object(
                row[10], "checkpoint record", {"thread_id": thread_id, "checkpoint_id": ref}
            )
            verify_record(serde, thread_id, checkpoint_ns, str(ref), fields, row[9])
            continue
        if kind == 2:
            raise CorruptValueError(
                "checkpoint record is unreadable (not a JSON object with channel_versions), "
                "and the delta channels of a later checkpoint replay through it",
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=ref,
            )
        entry = out.get(channel)
        if entry is None:
            continue
        if kind == 0 and blob is None:  # a seed kept inline in its record
            where = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
            value = from_sql(row[9], row[10], {**where, "channel": channel})
            if not takes_inline:
                load = inline_loader(serde, thread_id, checkpoint_ns, where)
                value = load(channel, value, {channel: ref})
            entry["seed"] = value
            continue
        data = (type_, blob if type(blob) is bytes else bytes(blob))
        if kind == 0:
            entry["seed"] = read(
                data,
                ValueLocation.blob(thread_id, checkpoint_ns, channel, ref) if located else None,
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                channel=channel,
                version=ref,
            )
            continue
        task_id, idx = d.decode_write_key(stored_task_id, stored_idx)
        value = _write_value(
            fast, read, located, data, thread_id, checkpoint_ns, ref, task_id, idx, channel
        )
        entry["writes"].append((task_id, channel, value))
    return out


def _write_value(
    fast: Callable[[tuple[str, bytes]], Any] | None,
    read: Callable[..., Any],
    located: bool,
    data: tuple[str, bytes],
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    idx: int,
    channel: str,
) -> Any:
    """A pending write's value: through the batch loader `fast` when there is one, else
    (or when it fails) through `read` at the write's location, whose error names it. Plain
    arguments, no dicts: this runs for every write of a history or a page."""
    if fast is not None:
        try:
            return fast(data)
        except Exception:
            pass
    location = (
        ValueLocation.write(thread_id, ns, checkpoint_id, task_id, idx, channel)
        if located
        else None
    )
    return read(
        data,
        location,
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        channel=channel,
        task_id=task_id,
    )


def delta_history_plan(
    d: Dialect, serde: Serializer, config: RunnableConfig, channels: Sequence[str]
) -> Plan[dict[str, DeltaChannelHistory]]:
    """`get_delta_channel_history` as statements inside another plan (retention): a walk
    that reaches its bound is looked at again (`confirm_walk_loop`) before it counts as a
    loop, as the savers' own read does."""
    thread_id, ns = thread_id_of(config), checkpoint_ns_of(config)
    out: dict[str, DeltaChannelHistory] = {}
    for chunk in delta_history_chunks(channels):
        rows = yield from delta_walk_plan(d, config, chunk, is_located(serde))
        out.update(
            decode_delta_history(rows, chunk, serde, d, thread_id=thread_id, checkpoint_ns=ns)
        )
    return out


def delta_walk_plan(
    d: Dialect, config: RunnableConfig, chunk: Sequence[str], records: bool = False
) -> Plan[list[Row]]:
    """The rows of `delta_history_stmt` for one chunk of channels; a walk that reached its
    bound is walked again with the exact one, unless `confirm_walk_loop` finds a loop."""
    rows = yield delta_history_stmt(d, config, chunk, records=records)
    if rows and rows[0][0] == WALK_BOUND_REACHED:
        thread_id, ns = thread_id_of(config), checkpoint_ns_of(config)
        pointers = yield parent_pointers_stmt(d, thread_id, ns)
        bound = confirm_walk_loop(pointers, thread_id, ns, checkpoint_id_of(config))
        rows = yield delta_history_stmt(d, config, chunk, bound, records)
    return rows


def delta_history_chunks(channels: Sequence[str]) -> list[list[str]]:
    """The channels, without repeats, in groups of at most 62: one statement each."""
    unique = list(dict.fromkeys(channels))
    return [
        unique[i : i + MAX_CHANNELS_PER_QUERY]
        for i in range(0, len(unique), MAX_CHANNELS_PER_QUERY)
    ]


def delta_history_stmts(
    d: Dialect, config: RunnableConfig, channels: Sequence[str]
) -> list[tuple[list[str], Stmt]]:
    """One statement per 62 channels (one in practice)."""
    return [
        (chunk, delta_history_stmt(d, config, chunk)) for chunk in delta_history_chunks(channels)
    ]


# --------------------------------------------------------------------------- writes
def put_op(
    d: Dialect,
    serde: Serializer,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    carried: Inline | None = None,
    restore: Mapping[str, tuple[Any, Any]] | None = None,
) -> tuple[Op[None], RunnableConfig, Inline]:
    """Serialize only the channels in `new_versions` that have a value; the checkpoint row
    records every version, so unchanged channels keep pointing at their older values.

    With a serializer that allows it, changed small scalars go into the record instead of
    value rows, with `carried` (the parent's inline values of unchanged channels, see
    `inline.py`); the record's inline values are returned with the op. `restore`:
    (version, value) of unchanged channels whose value may not be stored yet, written as
    value rows if absent (`unstored.py`)."""
    thread_id, ns = thread_id_of(config), checkpoint_ns_of(config)
    parent_id = parent_id_for_put(config, checkpoint)
    checkpoint_id = checkpoint["id"]
    changed = new_blob_channels(checkpoint, new_versions)
    inline: Inline = {}
    if serde_inlines(serde):
        inline = dict(carried or {})
        for channel, (_, value) in changed.items():
            if inlinable(value):
                inline[channel] = value
        if inline:
            changed = {ch: pair for ch, pair in changed.items() if ch not in inline}
    if restore:  # value rows only, written if absent (see `unstored.py`)
        changed = {**restore, **changed}
    if is_located(serde):
        blobs = [
            (
                channel,
                (v := version_text(version)),
                *dumps_at(serde, value, ValueLocation.blob(thread_id, ns, channel, v)),
            )
            for channel, (version, value) in changed.items()
        ]
    else:
        dumps = serde.dumps_typed
        blobs = [
            (channel, version_text(version), *dumps(value))
            for channel, (version, value) in changed.items()
        ]
    meta_text = d.check_metadata(encode_metadata(metadata))
    run_id = metadata.get("run_id")
    record = encode_record(
        checkpoint,
        inline,
        partial(make_seal, serde, thread_id, ns, checkpoint_id, parent_id=parent_id)
        if is_located(serde)
        else None,
    )
    where = f"in checkpoint {checkpoint_id!r}"
    check_stored_sizes(((ch, t, data) for ch, _, t, data in blobs), where)
    for name, text in (("(checkpoint record)", record), ("(metadata)", meta_text)):
        if len(text) > MAX_STORED_VALUE_BYTES // 4:  # UTF-8 takes at most 4 bytes a char
            check_stored_sizes([(name, "json", text.encode())], where)
    # Repeatable: blobs insert-if-absent, the checkpoint row is upserted by its id, and the
    # summary adds only what changed against the prior row (nothing, on a repeat).
    op = repeatable(
        lambda: d.put_plan(
            thread_id,
            ns,
            checkpoint_id,
            parent_id,
            None if run_id is None else str(run_id),
            record,
            meta_text,
            blobs,
            resolve_now(None),
        )
    )
    return op, make_config(thread_id, ns, checkpoint_id), inline


def unchanged_channels(checkpoint: Checkpoint, new_versions: ChannelVersions) -> set[str]:
    """The channels a put keeps at their version: their values are stored already."""
    return {ch for ch in checkpoint["channel_versions"] if ch not in new_versions}


def record_versions_and_inline(
    rows: Sequence[Row], where: Where
) -> tuple[Mapping[str, Any], Inline] | None:
    """A `record_stmt` result: the checkpoint's versions and inline values (None if there
    is no such checkpoint)."""
    if not rows:
        return None
    fields = _json_object(rows[0][0], "checkpoint record", where)
    versions = fields.get("channel_versions")
    return (versions if type(versions) is dict else {}), read_inline(fields, where) or {}


def record_stmt(d: Dialect, thread_id: str, ns: str, checkpoint_id: str) -> Stmt:
    """One checkpoint's record."""
    return Stmt(
        f"SELECT checkpoint FROM {d.checkpoints} WHERE thread_id = {d.p('thread_id')} "
        f"AND checkpoint_ns = {d.p('checkpoint_ns')} AND checkpoint_id = {d.p('checkpoint_id')}",
        {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id},
        fetch=True,
    )


def inline_sources_stmt(
    d: Dialect, thread_id: str, ns: str, wanted: Sequence[tuple[str, str]]
) -> Stmt:
    """For each (channel, version) in `wanted`, the value a record of the thread keeps
    inline at that version, if any does: rows (position in `wanted`, JSON type, text), see
    `inline.from_sql`. A put asks it for the unchanged channels whose version its parent's
    record does not hold (a `__copy__` fork written beside its original, a re-put of an
    existing checkpoint): their values then live in its own record too."""
    p = d.p
    params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    for i, (channel, version) in enumerate(wanted):
        params[f"ch{i}"], params[f"v{i}"] = channel, version
        params[f"ik{i}"] = inline_probe(channel)

    def build() -> str:
        parts = []
        for i in range(len(wanted)):
            kind, text = d.inline_value("c.checkpoint", p(f"ch{i}"))
            parts.append(
                f"SELECT * FROM (SELECT {d.bigint(str(i))} AS i, {kind} AS kind, {text} AS text "
                f"FROM {d.checkpoints} c WHERE c.thread_id = {p('thread_id')} "
                f"AND c.checkpoint_ns = {p('checkpoint_ns')} "
                f"AND {d.inline_has('c.checkpoint', p(f'ch{i}'), p(f'ik{i}'))} "
                f"AND {d.version_of('c.checkpoint', p(f'ch{i}'))} = {d.text(p(f'v{i}'))} "
                f"ORDER BY c.checkpoint_id DESC LIMIT 1) s{i}"
            )
        return " UNION ALL ".join(parts)

    return Stmt(d.sql(("inline_sources", len(wanted)), build), params, fetch=True)


def decode_inline_sources(
    rows: Sequence[Row], wanted: Sequence[tuple[str, str]], where: Where
) -> Inline:
    """The `inline_sources_stmt` result as {channel: value}."""
    return {wanted[int(i)][0]: from_sql(kind, text, where) for i, kind, text in rows}


def put_writes_op(
    d: Dialect,
    serde: Serializer,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> Op[None] | None:
    """A batch of only special channels replaces stored rows; any other batch inserts what
    is absent (a re-sent batch changes nothing). Duplicate slots in one batch keep the
    first write (insert) or the last (replace), as the in-memory saver does."""
    thread_id, ns, checkpoint_id = config_address(config)
    if checkpoint_id is None:
        raise CheckpointerError("put_writes needs a config that names a checkpoint_id")
    if not writes:
        return None
    stored_task_id, _ = d.encode_write_key(task_id, 0)
    task_name = d.task_name(task_id)
    replace = is_special_batch([channel for channel, _ in writes])
    dumps = serde.dumps_typed
    located = is_located(serde)
    rows: dict[int, tuple[int, str, str, bytes]] = {}
    for position, (channel, value) in enumerate(writes):
        given_idx = write_idx(channel, position)
        _, idx = d.encode_write_key(task_id, given_idx)
        if idx in rows and not replace:
            continue
        if located:
            where = ValueLocation.write(thread_id, ns, checkpoint_id, task_id, given_idx, channel)
            rows[idx] = (idx, channel, *dumps_at(serde, value, where))
        else:
            rows[idx] = (idx, channel, *dumps(value))
    check_stored_sizes((r[1:] for r in rows.values()), f"written by task {task_id!r}")
    # Repeatable: rows are keyed by (checkpoint, task, idx); a repeat inserts nothing new or
    # replaces a row by the same value, and the summary adds only the difference.
    return repeatable(
        lambda: d.put_writes_plan(
            thread_id,
            ns,
            checkpoint_id,
            stored_task_id,
            task_path,
            list(rows.values()),
            replace,
            resolve_now(None),
            task_name,
        )
    )


# --------------------------------------------------------------------------- summaries
SUMMARY_COLUMNS = "thread_id, head_checkpoint_id, checkpoint_count, bytes, created_at, updated_at"


SUMMARY_CLOCK_SECONDS = 1
"""How stale a thread summary's `updated_at` may be: a write within this many seconds of
the recorded one leaves it (and the expiry) alone."""


def summary_merge(d: Dialect) -> str:
    """ON CONFLICT clause that adds a write's deltas to a thread's summary row: the head
    moves forward only, count and bytes accumulate, the expiry follows the last write.

    `updated_at` moves only once it is `SUMMARY_CLOCK_SECONDS` old. It and `expires_at` are
    indexed, so changing them on every write of a busy thread re-indexes the row each time
    (PostgreSQL cannot update it in place, "HOT", and dead index entries pile up); left
    alone, the other columns update in place."""
    t = THREADS  # the target row, by table name (the schema prefix is not part of it)
    moved = f"excluded.updated_at > {d.add_seconds(f'{t}.updated_at', str(SUMMARY_CLOCK_SECONDS))}"
    return (
        "ON CONFLICT (thread_id) DO UPDATE SET "
        f"head_checkpoint_id = CASE WHEN excluded.head_checkpoint_id IS NULL "
        f"THEN {t}.head_checkpoint_id WHEN {t}.head_checkpoint_id IS NULL "
        f"OR excluded.head_checkpoint_id > {t}.head_checkpoint_id "
        f"THEN excluded.head_checkpoint_id ELSE {t}.head_checkpoint_id END, "
        f"checkpoint_count = {t}.checkpoint_count + excluded.checkpoint_count, "
        f"bytes = {t}.bytes + excluded.bytes, "
        f"updated_at = CASE WHEN {moved} THEN excluded.updated_at ELSE {t}.updated_at END, "
        f"expires_at = CASE WHEN {t}.ttl_seconds IS NULL THEN NULL WHEN {moved} "
        f"THEN {d.add_seconds('excluded.updated_at', f'{t}.ttl_seconds')} "
        f"ELSE {t}.expires_at END"
    )


def record_size(d: Dialect, alias: str) -> str:
    return (
        f"({d.size(f'{alias}.checkpoint', text=True)} + {d.size(f'{alias}.metadata', text=True)})"
    )


def refresh_summaries_stmts(d: Dialect, thread_ids: Sequence[str], now: datetime) -> list[Stmt]:
    """Recompute the summary rows of some threads from their stored rows (after deletes,
    copies and raw imports), then drop rows of threads left with nothing and no TTL.

    `updated_at` of an existing row is left alone: maintenance is not activity, and must
    not postpone a thread's expiry.
    """
    if not thread_ids:
        return []
    params = {"threads": d.list_param(sorted(set(thread_ids))), "now": d.ts_param(now)}

    def build() -> str:
        c, b, w = d.checkpoints, d.blobs, d.writes
        now_sql = d.typed(d.p("now"), "ts")
        return (
            f"INSERT INTO {d.threads} (thread_id, head_checkpoint_id, checkpoint_count, bytes, "
            "pinned_count, created_at, updated_at) "
            "SELECT t.tid, "
            f"(SELECT max(c.checkpoint_id) FROM {c} c WHERE c.thread_id = t.tid "
            "AND c.checkpoint_ns = ''), "
            f"(SELECT count(*) FROM {c} c WHERE c.thread_id = t.tid), "
            f"coalesce((SELECT sum({record_size(d, 'c')}) FROM {c} c "
            "WHERE c.thread_id = t.tid), 0) "
            f"+ coalesce((SELECT sum({d.size('b.blob')}) FROM {b} b "
            "WHERE b.thread_id = t.tid), 0) "
            f"+ coalesce((SELECT sum({d.size('w.blob')}) FROM {w} w "
            "WHERE w.thread_id = t.tid), 0), "
            f"(SELECT count(*) FROM {c} c WHERE c.thread_id = t.tid AND c.pinned), "
            f"{now_sql}, {now_sql} FROM {d.ids_table('threads')} t WHERE true "
            "ON CONFLICT (thread_id) DO UPDATE SET "
            "head_checkpoint_id = excluded.head_checkpoint_id, "
            "checkpoint_count = excluded.checkpoint_count, bytes = excluded.bytes, "
            "pinned_count = excluded.pinned_count"
        )

    cleanup = (
        f"DELETE FROM {d.threads} WHERE {d.in_list('thread_id', 'threads')} "
        "AND checkpoint_count = 0 AND bytes = 0 AND ttl_seconds IS NULL"
    )
    return [
        Stmt(d.sql(("refresh_summaries",), build), params),
        Stmt(cleanup, {"threads": params["threads"]}),
    ]


def refresh_summaries_plan(d: Dialect, thread_ids: Sequence[str]) -> Plan[None]:
    """`refresh_summaries_stmts` as a plan: run it inside the transaction that changed the
    rows (any code that writes the tables without the saver API must call it)."""
    yield from each(refresh_summaries_stmts(d, thread_ids, resolve_now(None)))


# --------------------------------------------------------------------------- lifecycle
@dataclass(slots=True)
class _Node:
    parent_id: str | None
    run_id: str | None
    versions: dict[str, str]
    delta_channels: frozenset[str]


Namespaces = dict[tuple[str, str], dict[str, _Node]]
BlobKey = tuple[str, str, str, str]


def _skeleton_plan(d: Dialect, thread_ids: Sequence[str]) -> Plan[tuple[Namespaces, set[BlobKey]]]:
    """The shape of some threads, without any value: parent pointers, run ids, channel
    versions, and which (channel, version) blobs exist. Lifecycle decisions need no more."""
    rows = yield Stmt(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
        f"{d.versions_column('checkpoint')}, {d.counters_column('metadata')}, "
        f"{d.inline_keys_column('checkpoint')} "
        f"FROM {d.checkpoints} WHERE {d.in_list('thread_id', 'threads')}",
        {"threads": d.list_param(list(thread_ids))},
        fetch=True,
    )
    namespaces: Namespaces = {}
    stored: set[BlobKey] = set()
    for thread_id, ns, checkpoint_id, parent_id, run_id, versions, counters, inline in rows:
        node = _Node(
            parent_id,
            run_id,
            {k: version_text(v) for k, v in (_json_value(versions) or {}).items()},
            delta_channels_of(_json_value(counters)),
        )
        namespaces.setdefault((thread_id, ns), {})[checkpoint_id] = node
        # A value kept inline is stored at its version as much as a value row is.
        stored.update(inline_keys(thread_id, ns, node.versions, inline))
    blob_rows = yield Stmt(
        f"SELECT thread_id, checkpoint_ns, channel, version FROM {d.blobs} "
        f"WHERE {d.in_list('thread_id', 'threads')}",
        {"threads": d.list_param(list(thread_ids))},
        fetch=True,
    )
    stored.update(tuple(r) for r in blob_rows)
    return namespaces, stored


def inline_keys(thread_id: str, ns: str, versions: Mapping[str, str], inline: Any) -> list[BlobKey]:
    """The (thread, ns, channel, version) keys of the values a record keeps inline, from
    `Dialect.inline_keys_column` (JSON of the names, or None)."""
    names = _json_value(inline) if inline is not None else None
    if not isinstance(names, list):
        return []
    return [(thread_id, ns, ch, versions[ch]) for ch in names if ch in versions]


def history_ancestors(
    thread_id: str, ns: str, namespace: Mapping[str, _Node], checkpoint_id: str, blobs: set[BlobKey]
) -> list[str]:
    """Ancestors whose writes or values the delta channels of `checkpoint_id` replay: back to
    the nearest stored value of every channel that has a version but no value here."""
    node = namespace[checkpoint_id]
    remaining = {
        ch
        for ch, v in node.versions.items()
        if ch in node.delta_channels and (thread_id, ns, ch, v) not in blobs
    }
    chain: list[str] = []
    cursor = node.parent_id
    seen = {checkpoint_id}
    while remaining and cursor is not None and cursor in namespace:
        if cursor in seen:
            raise history_loop(thread_id, ns, cursor)
        seen.add(cursor)
        chain.append(cursor)
        ancestor = namespace[cursor]
        remaining = {
            ch
            for ch in remaining
            if ch not in ancestor.versions
            or (thread_id, ns, ch, ancestor.versions[ch]) not in blobs
        }
        cursor = ancestor.parent_id
    return chain


def _delete_plan(
    d: Dialect,
    namespaces: Namespaces,
    blobs: set[BlobKey],
    doomed: dict[tuple[str, str], set[str]],
) -> Plan[None]:
    """Delete checkpoints (and the writes pending on them), then blobs no remaining
    checkpoint of their namespace references. Writes of checkpoints not saved yet stay."""
    keys = [(t, ns, cid) for (t, ns), ids in doomed.items() for cid in sorted(ids)]
    if not keys:
        return
    columns = ("thread_id", "checkpoint_ns", "checkpoint_id")
    yield d.delete_keys(d.writes, columns, keys)
    yield d.delete_keys(d.checkpoints, columns, keys)
    referenced = {
        (t, ns, ch, v)
        for (t, ns), namespace in namespaces.items()
        for cid, node in namespace.items()
        if cid not in doomed.get((t, ns), ())
        for ch, v in node.versions.items()
    }
    touched = set(doomed)
    garbage = sorted(k for k in blobs if (k[0], k[1]) in touched and k not in referenced)
    if garbage:
        yield d.delete_keys(d.blobs, ("thread_id", "checkpoint_ns", "channel", "version"), garbage)


def delete_for_runs_plan(
    d: Dialect, run_ids: Sequence[str], thread_ids: Sequence[str] | None = None
) -> Plan[None]:
    """Checkpoints created by the runs, their writes, and blobs nothing else uses (only in
    `thread_ids` when given).

    Refuses (CheckpointerError) when a checkpoint of another run rebuilds a delta channel
    from a doomed one: deleting would silently change that checkpoint's state.
    """
    runs = [str(r) for r in run_ids]
    rows = yield Stmt(
        f"SELECT DISTINCT thread_id FROM {d.checkpoints} WHERE {d.in_list('run_id', 'runs')}",
        {"runs": d.list_param(runs)},
        fetch=True,
    )
    if thread_ids is not None:
        rows = [r for r in rows if r[0] in set(thread_ids)]
    if not rows:
        return
    namespaces, blobs = yield from _skeleton_plan(d, sorted(r[0] for r in rows))
    wanted = set(runs)
    doomed: dict[tuple[str, str], set[str]] = {}
    for (thread_id, ns), namespace in namespaces.items():
        ids = {cid for cid, node in namespace.items() if node.run_id in wanted}
        if not ids:
            continue
        for cid in namespace:
            if cid in ids:
                continue
            needed = ids.intersection(history_ancestors(thread_id, ns, namespace, cid, blobs))
            if needed:
                raise CheckpointerError(
                    f"cannot delete these runs: checkpoint {cid} of thread {thread_id!r} "
                    f"rebuilds its delta channels from checkpoint(s) {sorted(needed)} they "
                    "created; delete the later runs too, or prune the thread first"
                )
        doomed[(thread_id, ns)] = ids
    yield from _delete_plan(d, namespaces, blobs, doomed)
    yield from refresh_summaries_plan(d, sorted({t for t, _ in doomed}))


# --------------------------------------------------------------------------- names
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


def quote_ident(name: str) -> str:
    """A double-quoted SQL identifier (schema names are user input)."""
    if not isinstance(name, str) or not name or "\x00" in name or len(name) > 63:
        raise ConfigError(f"invalid schema name {name!r}")
    return '"' + name.replace('"', '""') + '"'


StatementHook = Callable[[str], None]
