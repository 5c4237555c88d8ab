"""Read-only inspection queries for the time-travel tools, as sans-I/O plans.

Same model as the saver plans (`plan.py`): each function is a plan that yields `Stmt`s
and receives rows, so one
text serves SQLite and PostgreSQL through the executors in `sync_exec` / `async_exec`.
Nothing here deserializes a value: plans return raw `(type, bytes)` pairs and the caller
decides how to load them (the tools load leniently, so one unloadable value never hides a
whole checkpoint). Only the few SQL fragments that differ between the two databases (byte
lengths, JSON fields, list aggregates) are spelled per dialect, in `_Sql`.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from checkpointer.channels.markers import DeltaSnapshot
from checkpointer.errors import CorruptValueError, DeserializationError
from checkpointer.savers.base import history_loop
from checkpointer.savers.metadata import unescape_json_value
from checkpointer.savers.sql.delta import delta_history_chunks, delta_walk_plan
from checkpointer.savers.sql.delta_sql import WALK_BOUND_REACHED
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inline import RECORD_KEY as INLINE_KEY
from checkpointer.savers.sql.inline import from_sql, stored_form
from checkpointer.savers.sql.plan import Plan, Row, Stmt
from checkpointer.savers.sql.records import version_text
from checkpointer.savers.sql.tails import bases_plan, is_tail, join_whole
from checkpointer.serde import default_serializer
from checkpointer.types import INTERRUPT, RunnableConfig, checkpoint_ns_of, thread_id_of

ThreadSort = Literal["updated", "count", "bytes", "id"]
THREAD_SORTS: tuple[str, ...] = ("updated", "count", "bytes", "id")


def _snapshot_prefix() -> bytes:
    """The bytes every stored `DeltaSnapshot` starts with (its msgpack extension marker),
    so SQL can tell snapshots from other values without loading them."""
    serde = default_serializer()
    a = serde.dumps_typed(DeltaSnapshot(None))[1]
    b = serde.dumps_typed(DeltaSnapshot([1]))[1]
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


SNAPSHOT_PREFIX = _snapshot_prefix()
COMPRESSED_MSGPACK = "msgpack+zstd"


def snapshot_marked(type_: str, blob: bytes) -> bool:
    """Whether a stored value is a `DeltaSnapshot`, told from its first bytes; a
    compressed value has only its first bytes decompressed."""
    if type_ == "msgpack":
        return bytes(blob[: len(SNAPSHOT_PREFIX)]) == SNAPSHOT_PREFIX
    if type_ != COMPRESSED_MSGPACK:
        return False
    try:
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(blob))) as reader:
            head = reader.read(len(SNAPSHOT_PREFIX))
    except Exception:  # a corrupt frame is not a snapshot we can tell
        return False
    return bytes(head) == SNAPSHOT_PREFIX


class _Sql:
    """The fragments that differ between SQLite and PostgreSQL for these queries."""

    def __init__(self, d: Dialect) -> None:
        self.d = d
        self.pg = d.name == "postgresql"

    def size(self, column: str, *, json_column: bool = False) -> str:
        """Stored payload bytes of a column (UTF-8 bytes for JSON/text)."""
        if self.pg:
            return f"octet_length({column}::text)" if json_column else f"octet_length({column})"
        return f"length(CAST({column} AS BLOB))"

    def record_size(self, alias: str = "") -> str:
        prefix = f"{alias}." if alias else ""
        return (
            f"({self.size(prefix + 'checkpoint', json_column=True)} + "
            f"{self.size(prefix + 'metadata', json_column=True)})"
        )

    def field(self, column: str, key: str) -> str:
        """A top-level JSON field as SQL text/number (`key` is a constant of ours)."""
        if self.pg:
            return f"({column} ->> '{key}')"
        return f"json_extract({column}, '$.{key}')"

    def distinct_list(self, column: str) -> str:
        if self.pg:
            return f"array_agg(DISTINCT {column})"
        return f"json_group_array(DISTINCT {column})"

    def list_value(self, value: Any) -> list[Any]:
        if value is None:
            return []
        if isinstance(value, str):
            return list(json.loads(value))
        return list(value)

    def is_snapshot(self, column: str) -> str:
        prefix = f"substr({column}, 1, {len(SNAPSHOT_PREFIX)})"
        return f"(type = 'msgpack' AND {prefix} = {self.d.p('snap')})"

    def where_thread(self, thread_id: str | None, params: dict[str, Any]) -> str:
        if thread_id is None:
            return ""
        params["thread_id"] = thread_id
        return f" WHERE thread_id = {self.d.p('thread_id')}"


def _int(value: Any) -> int:
    """SUM() comes back as Decimal on PostgreSQL and None over no rows."""
    return int(value or 0)


def _opt_int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def json_doc(value: Any, *, metadata: bool = False) -> dict[str, Any]:
    """A JSON column as a dict: jsonb arrives parsed (psycopg), SQLite gives text. For the
    metadata column, PostgreSQL's NUL escapes are undone (`metadata.escape_json_text`)."""
    if value is None:
        return {}
    if isinstance(value, str | bytes):
        parsed = json.loads(value)
        return parsed if isinstance(parsed, dict) else {}
    return dict(unescape_json_value(value)) if metadata else dict(value)


# --------------------------------------------------------------------------- threads
@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One line of `checkpointer threads`."""

    thread_id: str
    namespaces: list[str]
    checkpoints: int
    last_checkpoint_id: str
    last_step: int | None
    last_updated: str | None
    bytes: int


def thread_summaries_plan(
    d: Dialect,
    sort: str = "updated",
    limit: int | None = None,
    offset: int = 0,
    thread_ids: Sequence[str] | None = None,
) -> Plan[tuple[int, list[ThreadSummary]]]:
    """(number of threads, the summaries sorted and limited) in two statements.

    `bytes` is the stored payload of the thread: checkpoint records and metadata, channel
    values and pending writes (not indexes or page overhead). The last step and update come
    from the newest checkpoint of the root namespace (of any namespace if it has none).
    """
    if sort not in THREAD_SORTS:
        raise ValueError(f"unknown sort {sort!r}; expected one of {', '.join(THREAD_SORTS)}")
    q = _Sql(d)
    params: dict[str, Any] = {}
    only = ""
    if thread_ids is not None:
        if not thread_ids:
            return 0, []
        params["ids"] = d.list_param(sorted({str(t) for t in thread_ids}))
        only = f" WHERE {d.in_list('thread_id', 'ids')}"
    total_rows = yield Stmt(
        f"SELECT COUNT(DISTINCT thread_id) FROM {d.checkpoints}{only}", dict(params), True
    )
    order = {
        "updated": "(q.last_ts IS NULL), q.last_ts DESC, q.thread_id",
        "count": "q.n DESC, q.thread_id",
        "bytes": "q.bytes DESC, q.thread_id",
        "id": "q.thread_id",
    }[sort]
    head = (
        f"FROM {d.checkpoints} h WHERE h.thread_id = s.thread_id AND h.checkpoint_id = s.last_id "
        "ORDER BY h.checkpoint_ns LIMIT 1"
    )
    sql = (
        "WITH c AS (SELECT thread_id, COUNT(*) AS n, "
        "COALESCE(MAX(CASE WHEN checkpoint_ns = '' THEN checkpoint_id END), "
        f"MAX(checkpoint_id)) AS last_id, SUM({q.record_size()}) AS rec_bytes, "
        f"{q.distinct_list('checkpoint_ns')} AS nss FROM {d.checkpoints}{only} "
        "GROUP BY thread_id), "
        f"b AS (SELECT thread_id, SUM({q.size('blob')}) AS bytes FROM {d.blobs}{only} "
        "GROUP BY thread_id), "
        f"w AS (SELECT thread_id, SUM({q.size('blob')}) AS bytes FROM {d.writes}{only} "
        "GROUP BY thread_id), "
        "s AS (SELECT c.thread_id, c.n, c.last_id, c.nss, "
        "c.rec_bytes + COALESCE(b.bytes, 0) + COALESCE(w.bytes, 0) AS bytes FROM c "
        "LEFT JOIN b ON b.thread_id = c.thread_id LEFT JOIN w ON w.thread_id = c.thread_id) "
        "SELECT q.thread_id, q.nss, q.n, q.last_id, q.last_step, q.last_ts, q.bytes FROM ("
        "SELECT s.thread_id, s.nss, s.n, s.last_id, s.bytes, "
        f"(SELECT {q.field('h.metadata', 'step')} {head}) AS last_step, "
        f"(SELECT {q.field('h.checkpoint', 'ts')} {head}) AS last_ts FROM s) q "
        f"ORDER BY {order}"
    )
    if limit is not None or offset:
        sql += f" LIMIT {d.p('limit')} OFFSET {d.p('offset')}"
        params["limit"] = max(int(limit), 0) if limit is not None else -1
        if q.pg and limit is None:
            sql = sql.replace(f"LIMIT {d.p('limit')} ", "")
            del params["limit"]
        params["offset"] = max(int(offset), 0)
    rows = yield Stmt(sql, params, fetch=True)
    summaries = [
        ThreadSummary(
            thread_id=str(thread_id),
            namespaces=sorted(str(ns) for ns in q.list_value(nss)),
            checkpoints=_int(n),
            last_checkpoint_id=str(last_id),
            last_step=_opt_int(last_step),
            last_updated=None if last_ts is None else str(last_ts),
            bytes=_int(size),
        )
        for thread_id, nss, n, last_id, last_step, last_ts, size in rows
    ]
    return _int(total_rows[0][0]) if total_rows else 0, summaries


def existing_threads_plan(d: Dialect, thread_ids: Sequence[str]) -> Plan[set[str]]:
    """Which of `thread_ids` have at least one checkpoint."""
    if not thread_ids:
        return set()
    rows = yield Stmt(
        f"SELECT DISTINCT thread_id FROM {d.checkpoints} WHERE {d.in_list('thread_id', 'ids')}",
        {"ids": d.list_param([str(t) for t in thread_ids])},
        fetch=True,
    )
    return {str(r[0]) for r in rows}


def all_thread_ids_plan(d: Dialect) -> Plan[list[str]]:
    rows = yield Stmt(
        f"SELECT DISTINCT thread_id FROM {d.checkpoints} ORDER BY thread_id", (), fetch=True
    )
    return [str(r[0]) for r in rows]


def threads_of_runs_plan(d: Dialect, run_ids: Sequence[str]) -> Plan[dict[str, list[str]]]:
    """run id -> the threads holding checkpoints it created (runs without any left out)."""
    rows = yield Stmt(
        f"SELECT DISTINCT run_id, thread_id FROM {d.checkpoints} "
        f"WHERE {d.in_list('run_id', 'runs')} ORDER BY run_id, thread_id",
        {"runs": d.list_param([str(r) for r in run_ids])},
        fetch=True,
    )
    out: dict[str, list[str]] = {}
    for run_id, thread_id in rows:
        out.setdefault(str(run_id), []).append(str(thread_id))
    return out


def resolve_checkpoint_plan(
    d: Dialect, thread_id: str, ns: str, ref: str | None
) -> Plan[list[str]]:
    """Checkpoint ids of (thread, ns) that `ref` names: the head when `ref` is None, else an
    exact id, else every id that starts or ends with `ref` (so a short, unique prefix or
    suffix works). The caller decides what zero or several matches mean."""
    params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    base = (
        f"SELECT checkpoint_id FROM {d.checkpoints} WHERE thread_id = {d.p('thread_id')} "
        f"AND checkpoint_ns = {d.p('checkpoint_ns')}"
    )
    if ref is None:
        rows = yield Stmt(base + " ORDER BY checkpoint_id DESC LIMIT 1", params, fetch=True)
        return [str(r[0]) for r in rows]
    params["ref"] = ref
    rows = yield Stmt(base + f" AND checkpoint_id = {d.p('ref')}", params, fetch=True)
    if rows:
        return [str(rows[0][0])]
    n = len(ref)  # an int of ours: safe as a literal, and typed as SQL integer
    rows = yield Stmt(
        base + f" AND (substr(checkpoint_id, 1, {n}) = {d.p('ref')} OR "
        f"substr(checkpoint_id, length(checkpoint_id) - {n - 1}) = {d.p('ref')}) "
        "ORDER BY checkpoint_id LIMIT 10",
        params,
        fetch=True,
    )
    return [str(r[0]) for r in rows]


# --------------------------------------------------------------------------- skeleton
@dataclass(frozen=True, slots=True)
class WriteInfo:
    """A pending write without its value (except `__interrupt__` ones, which are shown)."""

    task_id: str
    task_path: str
    idx: int
    channel: str
    raw: Any = None
    """`(type, bytes)` of an `__interrupt__` write (or it `Located`), else None."""


@dataclass(slots=True)
class SkeletonNode:
    """One checkpoint's shape: links, record (versions, ts, updated channels), metadata and
    the channels of its pending writes. No channel value is read."""

    checkpoint_id: str
    parent_id: str | None
    record: dict[str, Any]
    metadata: dict[str, Any]
    writes: list[WriteInfo] = field(default_factory=list)


def skeleton_plan(d: Dialect, thread_id: str, ns: str) -> Plan[dict[str, SkeletonNode]]:
    """Every checkpoint of (thread, ns) by id, oldest first, with its writes' channels."""
    params = {"thread_id": thread_id, "checkpoint_ns": ns}
    where = f"WHERE thread_id = {d.p('thread_id')} AND checkpoint_ns = {d.p('checkpoint_ns')}"
    rows = yield Stmt(
        f"SELECT checkpoint_id, parent_checkpoint_id, checkpoint, metadata FROM {d.checkpoints} "
        f"{where} ORDER BY checkpoint_id",
        params,
        fetch=True,
    )
    nodes = {
        str(cid): SkeletonNode(
            str(cid),
            None if pid is None else str(pid),
            json_doc(rec),
            json_doc(meta, metadata=True),
        )
        for cid, pid, rec, meta in rows
    }
    write_rows = yield Stmt(
        f"SELECT checkpoint_id, {d.task_id_text('task_id')}, task_path, idx, channel, "
        f"CASE WHEN channel = {d.p('interrupt')} THEN type END, "
        f"CASE WHEN channel = {d.p('interrupt')} THEN blob END FROM {d.writes} {where} "
        "ORDER BY checkpoint_id, task_path, 2, idx",
        {**params, "interrupt": INTERRUPT},
        fetch=True,
    )
    for cid, stored_task_id, task_path, stored_idx, channel, type_, blob in write_rows:
        node = nodes.get(str(cid))
        if node is not None:
            raw = None if type_ is None else (str(type_), bytes(blob or b""))
            task_id, idx = d.decode_write_key(stored_task_id, stored_idx)
            node.writes.append(WriteInfo(task_id, str(task_path or ""), idx, str(channel), raw))
    return nodes


@dataclass(frozen=True, slots=True)
class Ancestor:
    depth: int
    checkpoint_id: str
    parent_id: str | None
    step: int | None


def ancestors_plan(
    d: Dialect, thread_id: str, ns: str, checkpoint_id: str, max_depth: int
) -> Plan[list[Ancestor]]:
    """The checkpoint (depth 0) and its ancestors up to `max_depth`, nearest first, by
    following parent pointers (never id order)."""
    q = _Sql(d)
    params = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": checkpoint_id,
        "max_depth": max_depth,
    }
    rows = yield Stmt(
        "WITH RECURSIVE walk(checkpoint_id, parent_id, step, depth) AS ("
        f"SELECT checkpoint_id, parent_checkpoint_id, {q.field('metadata', 'step')}, 0 "
        f"FROM {d.checkpoints} WHERE thread_id = {d.p('thread_id')} "
        f"AND checkpoint_ns = {d.p('checkpoint_ns')} AND checkpoint_id = {d.p('checkpoint_id')} "
        "UNION ALL SELECT c.checkpoint_id, c.parent_checkpoint_id, "
        f"{q.field('c.metadata', 'step')}, w.depth + 1 FROM walk w JOIN {d.checkpoints} c "
        f"ON c.thread_id = {d.p('thread_id')} AND c.checkpoint_ns = {d.p('checkpoint_ns')} "
        f"AND c.checkpoint_id = w.parent_id WHERE w.depth < {d.p('max_depth')}) "
        "SELECT depth, checkpoint_id, parent_id, step FROM walk ORDER BY depth",
        params,
        fetch=True,
    )
    return [
        Ancestor(int(depth), str(cid), None if pid is None else str(pid), _opt_int(step))
        for depth, cid, pid, step in rows
    ]


# --------------------------------------------------------------------------- raw values
@dataclass(frozen=True, slots=True)
class RawWrite:
    checkpoint_id: str
    task_id: str
    task_path: str
    idx: int
    channel: str
    type: str
    blob: Any
    """The stored bytes (or a `checkpointer.reader.Loaded` value, from readers of formats
    that only give values decoded)."""

    @property
    def raw(self) -> Any:
        return raw_pair(self.type, self.blob)


def raw_pair(type_: str, blob: Any) -> Any:
    """What `Reader.load` takes: `(type, bytes)`, or the already loaded value."""
    return blob if type(blob).__name__ in ("Loaded", "Located") else (type_, blob)


@dataclass(slots=True)
class RawTuple:
    """A checkpoint with its values and pending writes still serialized."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    record: dict[str, Any]
    metadata: dict[str, Any]
    blobs: dict[str, Any]
    """channel -> `(type, bytes)` (or a `Loaded` value) stored at the checkpoint's version."""
    writes: list[RawWrite]


def _whole_tails_plan(
    d: Dialect, thread_id: str, ns: str, record: Any, blobs: dict[str, Any]
) -> Plan[None]:
    """Tail rows among `blobs` (`tails.py`) replaced by their whole value's stored pair,
    joined from bytes with their base, so whoever shows them needs to know nothing of
    tails. One whose base cannot be joined (missing, or sealed) stays as stored: its
    tag then says why it cannot be shown."""
    tails = {ch: pair for ch, pair in blobs.items() if is_tail(pair[0])}
    versions = record.get("channel_versions") if isinstance(record, dict) else None
    if not tails or not isinstance(versions, dict):
        return
    keys = {ch: (thread_id, ns, ch, version_text(versions[ch])) for ch in tails if ch in versions}
    bases = yield from bases_plan(d, keys.values())
    for channel, key in keys.items():
        found = bases.get(key)
        if found is None:
            continue
        try:
            blobs[channel] = join_whole(found[1], tails[channel], {})
        except (CorruptValueError, DeserializationError):
            continue


def raw_tuple_plan(
    d: Dialect, thread_id: str, ns: str, checkpoint_id: str
) -> Plan[RawTuple | None]:
    """One checkpoint, the stored value of each channel at its version, and its writes."""
    params = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    key = (
        f"thread_id = {d.p('thread_id')} AND checkpoint_ns = {d.p('checkpoint_ns')} "
        f"AND checkpoint_id = {d.p('checkpoint_id')}"
    )
    rows = yield Stmt(
        f"SELECT parent_checkpoint_id, checkpoint, metadata FROM {d.checkpoints} WHERE {key}",
        params,
        fetch=True,
    )
    if not rows:
        return None
    parent_id, record, metadata = rows[0]
    blob_rows = yield Stmt(
        f"SELECT v.key, bl.type, bl.blob FROM {d.checkpoints} c "
        f"{d.versions_join('c.checkpoint', 'v')} JOIN {d.blobs} bl "
        "ON bl.thread_id = c.thread_id AND bl.checkpoint_ns = c.checkpoint_ns "
        f"AND bl.channel = v.key AND bl.version = {d.versions_value('v')} "
        f"WHERE c.thread_id = {d.p('thread_id')} AND c.checkpoint_ns = {d.p('checkpoint_ns')} "
        f"AND c.checkpoint_id = {d.p('checkpoint_id')}",
        params,
        fetch=True,
    )
    write_rows = yield Stmt(
        f"SELECT {d.task_id_text('task_id')}, task_path, idx, channel, type, blob "
        f"FROM {d.writes} WHERE {key} ORDER BY task_path, 1, idx",
        params,
        fetch=True,
    )
    doc = json_doc(record)
    blobs = {str(ch): (str(t), bytes(b)) for ch, t, b in blob_rows}
    yield from _whole_tails_plan(d, thread_id, ns, doc, blobs)
    # Values kept in the record (see `sql/inline.py`) show as the value rows they stand for.
    inline = doc.pop(INLINE_KEY, None) if isinstance(doc, dict) else None
    if isinstance(inline, dict):
        for channel, value in inline.items():
            blobs.setdefault(str(channel), stored_form(value))
    return RawTuple(
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        parent_id=None if parent_id is None else str(parent_id),
        record=doc,
        metadata=json_doc(metadata, metadata=True),
        blobs=blobs,
        writes=[
            RawWrite(checkpoint_id, *_key(d, tid, idx, path), str(ch), str(t), bytes(b))
            for tid, path, idx, ch, t, b in write_rows
        ],
    )


def raw_writes_plan(
    d: Dialect,
    thread_id: str,
    ns: str,
    checkpoint_ids: Sequence[str],
    channels: Sequence[str] | None = None,
) -> Plan[list[RawWrite]]:
    """Pending writes of some checkpoints (optionally only some channels), in
    `(checkpoint_id, task_path, task_id, idx)` order; callers reorder by path."""
    if not checkpoint_ids or (channels is not None and not channels):
        return []
    params: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "ids": d.list_param(list(checkpoint_ids)),
    }
    sql = (
        f"SELECT checkpoint_id, {d.task_id_text('task_id')}, task_path, idx, channel, type, "
        f"blob FROM {d.writes} WHERE thread_id = {d.p('thread_id')} "
        f"AND checkpoint_ns = {d.p('checkpoint_ns')} AND {d.in_list('checkpoint_id', 'ids')}"
    )
    if channels is not None:
        params["channels"] = d.list_param(list(channels))
        sql += f" AND {d.in_list('channel', 'channels')}"
    rows = yield Stmt(sql + " ORDER BY checkpoint_id, task_path, 2, idx", params, fetch=True)
    return [
        RawWrite(str(cid), *_key(d, tid, idx, path), str(ch), str(t), bytes(b))
        for cid, tid, path, idx, ch, t, b in rows
    ]


def _key(d: Dialect, stored_task_id: Any, stored_idx: Any, path: Any) -> tuple[str, str, int]:
    """`(task_id, task_path, idx)` of a stored write, as it was given to put_writes."""
    task_id, idx = d.decode_write_key(stored_task_id, stored_idx)
    return task_id, str(path or ""), idx


@dataclass(frozen=True, slots=True)
class RawHistoryRow:
    """One row of the delta-history walk: a seed (kind 0) or a write (kind 1) found
    `depth` parents above the target."""

    kind: int
    depth: int
    channel: str
    task_path: str
    task_id: str
    idx: int
    type: str
    blob: Any
    """Bytes, or a `checkpointer.reader.Loaded` value."""

    @property
    def raw(self) -> Any:
        return raw_pair(self.type, self.blob)


def raw_delta_history_plan(
    d: Dialect, config: RunnableConfig, channels: Sequence[str]
) -> Plan[list[RawHistoryRow]]:
    """The savers' own one-statement ancestor walk, rows left serialized (a seed kept
    inline in its record as the value row it stands for)."""
    out: list[RawHistoryRow] = []
    for chunk in delta_history_chunks(channels):
        rows: list[Row] = yield from delta_walk_plan(d, config, chunk)
        for row in rows:
            kind, depth, channel, path, task_id, idx, type_, blob = row[:8]
            if kind == WALK_BOUND_REACHED:
                raise history_loop(thread_id_of(config), checkpoint_ns_of(config), str(row[8]))
            if kind == 0 and blob is None:
                type_, blob = stored_form(from_sql(row[9], row[10], {"channel": channel}))
            out.append(
                RawHistoryRow(
                    int(kind),
                    int(depth),
                    str(channel),
                    str(path or ""),
                    *(
                        ("", -1)
                        if task_id is None
                        else d.decode_write_key(task_id, -1 if idx is None else idx)
                    ),
                    str(type_),
                    bytes(blob),
                )
            )
    return out


# --------------------------------------------------------------------------- stats
@dataclass(frozen=True, slots=True)
class TableStats:
    table: str
    rows: int
    bytes: int
    disk_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ThreadBytes:
    thread_id: str
    checkpoints: int
    checkpoint_bytes: int
    blob_bytes: int
    write_bytes: int

    @property
    def total(self) -> int:
        return self.checkpoint_bytes + self.blob_bytes + self.write_bytes


@dataclass(frozen=True, slots=True)
class ChannelBytes:
    """What one channel stores: values (blobs, of which snapshots) and pending writes."""

    channel: str
    blobs: int
    blob_bytes: int
    snapshots: int
    snapshot_bytes: int
    writes: int
    write_bytes: int

    @property
    def is_delta(self) -> bool:
        """A channel that stored `DeltaSnapshot`s is a delta channel."""
        return self.snapshots > 0

    @property
    def total(self) -> int:
        return self.blob_bytes + self.write_bytes


@dataclass(frozen=True, slots=True)
class Stats:
    tables: list[TableStats]
    threads: list[ThreadBytes]
    thread_count: int
    channels: list[ChannelBytes]
    database_bytes: int | None = None
    free_bytes: int | None = None


def stats_plan(d: Dialect, thread_id: str | None = None, top: int = 10) -> Plan[Stats]:
    """Bytes per table, per thread (the `top` largest), per channel; database size on disk
    when looking at the whole database."""
    q = _Sql(d)
    params: dict[str, Any] = {}
    where = q.where_thread(thread_id, params)
    disk: dict[str, int] = {}
    if thread_id is None and not q.pg:
        has_dbstat = yield Stmt(
            "SELECT 1 FROM pragma_module_list WHERE name = 'dbstat'", (), fetch=True
        )
        if has_dbstat:
            # Pages of each table and of its indexes.
            disk_rows = yield Stmt(
                "SELECT m.tbl_name, SUM(s.pgsize) FROM dbstat s JOIN sqlite_master m "
                "ON m.name = s.name GROUP BY m.tbl_name",
                (),
                fetch=True,
            )
            disk = {str(name): _int(size) for name, size in disk_rows}
    tables: list[TableStats] = []
    for name, table, size in (
        ("checkpoints", d.checkpoints, q.record_size()),
        ("blobs", d.blobs, q.size("blob")),
        ("writes", d.writes, q.size("blob")),
    ):
        rows = yield Stmt(
            f"SELECT COUNT(*), COALESCE(SUM({size}), 0) FROM {table}{where}", params, True
        )
        on_disk = disk.get(table)
        if q.pg and thread_id is None:
            disk_rows = yield Stmt(
                "SELECT pg_total_relation_size(to_regclass(%(t)s))", {"t": table}, fetch=True
            )
            on_disk = _opt_int(disk_rows[0][0]) if disk_rows else None
        tables.append(TableStats(name, _int(rows[0][0]), _int(rows[0][1]), on_disk))

    thread_rows = yield Stmt(
        "SELECT thread_id, SUM(n), SUM(cb), SUM(bb), SUM(wb) FROM ("
        f"SELECT thread_id, 1 AS n, {q.record_size()} AS cb, 0 AS bb, 0 AS wb "
        f"FROM {d.checkpoints}{where} UNION ALL "
        f"SELECT thread_id, 0, 0, {q.size('blob')}, 0 FROM {d.blobs}{where} UNION ALL "
        f"SELECT thread_id, 0, 0, 0, {q.size('blob')} FROM {d.writes}{where}) x "
        "GROUP BY thread_id ORDER BY SUM(cb) + SUM(bb) + SUM(wb) DESC, thread_id",
        params,
        fetch=True,
    )
    threads = [
        ThreadBytes(str(t), _int(n), _int(cb), _int(bb), _int(wb))
        for t, n, cb, bb, wb in thread_rows
    ]

    channel_params = {**params, "snap": SNAPSHOT_PREFIX}
    channel_rows = yield Stmt(
        "SELECT channel, SUM(bn), SUM(bb), SUM(sn), SUM(sb), SUM(wn), SUM(wb) FROM ("
        f"SELECT channel, 1 AS bn, {q.size('blob')} AS bb, "
        f"CASE WHEN {q.is_snapshot('blob')} THEN 1 ELSE 0 END AS sn, "
        f"CASE WHEN {q.is_snapshot('blob')} THEN {q.size('blob')} ELSE 0 END AS sb, "
        f"0 AS wn, 0 AS wb FROM {d.blobs}{where} UNION ALL "
        f"SELECT channel, 0, 0, 0, 0, 1, {q.size('blob')} FROM {d.writes}{where}) x "
        "GROUP BY channel ORDER BY SUM(bb) + SUM(wb) DESC, channel",
        channel_params,
        fetch=True,
    )
    channels = [
        ChannelBytes(str(ch), _int(bn), _int(bb), _int(sn), _int(sb), _int(wn), _int(wb))
        for ch, bn, bb, sn, sb, wn, wb in channel_rows
    ]
    # Compressed values hide their snapshot marker from SQL: look at their first bytes.
    zstd_params = {**params, "zstd": COMPRESSED_MSGPACK}
    zstd_where = f"{where} AND" if where else " WHERE"
    compressed = yield Stmt(
        f"SELECT channel, blob FROM {d.blobs}{zstd_where} type = {d.p('zstd')}",
        zstd_params,
        fetch=True,
    )
    found: dict[str, list[int]] = {}
    for channel, blob in compressed:
        if snapshot_marked(COMPRESSED_MSGPACK, bytes(blob)):
            tally = found.setdefault(str(channel), [0, 0])
            tally[0] += 1
            tally[1] += len(bytes(blob))
    channels = [
        dataclasses.replace(
            c,
            snapshots=c.snapshots + found[c.channel][0],
            snapshot_bytes=c.snapshot_bytes + found[c.channel][1],
        )
        if c.channel in found
        else c
        for c in channels
    ]

    database_bytes = free_bytes = None
    if thread_id is None and not q.pg:
        size_rows = yield Stmt(
            "SELECT p.page_count * s.page_size, f.freelist_count * s.page_size "
            "FROM pragma_page_count() p, pragma_page_size() s, pragma_freelist_count() f",
            (),
            fetch=True,
        )
        if size_rows:
            database_bytes, free_bytes = _int(size_rows[0][0]), _int(size_rows[0][1])
    elif thread_id is None:
        database_bytes = sum(t.disk_bytes or 0 for t in tables)
    return Stats(
        tables=tables,
        threads=threads[: max(top, 0)],
        thread_count=len(threads),
        channels=channels,
        database_bytes=database_bytes,
        free_bytes=free_bytes,
    )


# --------------------------------------------------------------------------- footprint
@dataclass(slots=True)
class Footprint:
    """What some threads hold, to report what an operation removed or would remove."""

    checkpoints: dict[tuple[str, str, str], int | None] = field(default_factory=dict)
    """(thread, ns, checkpoint id) -> step."""
    bytes: dict[str, int] = field(default_factory=dict)
    """thread -> payload bytes."""
    writes: dict[str, int] = field(default_factory=dict)
    blobs: dict[str, int] = field(default_factory=dict)

    def total_bytes(self) -> int:
        return sum(self.bytes.values())


def footprint_plan(d: Dialect, thread_ids: Sequence[str]) -> Plan[Footprint]:
    q = _Sql(d)
    params = {"ids": d.list_param([str(t) for t in thread_ids])}
    where = f"WHERE {d.in_list('thread_id', 'ids')}"
    out = Footprint()
    rows = yield Stmt(
        f"SELECT thread_id, checkpoint_ns, checkpoint_id, {q.field('metadata', 'step')}, "
        f"{q.record_size()} FROM {d.checkpoints} {where}",
        params,
        fetch=True,
    )
    for thread_id, ns, cid, step, size in rows:
        out.checkpoints[(str(thread_id), str(ns), str(cid))] = _opt_int(step)
        out.bytes[str(thread_id)] = out.bytes.get(str(thread_id), 0) + _int(size)
    for table, counts in ((d.blobs, out.blobs), (d.writes, out.writes)):
        rows = yield Stmt(
            f"SELECT thread_id, COUNT(*), COALESCE(SUM({q.size('blob')}), 0) FROM {table} "
            f"{where} GROUP BY thread_id",
            params,
            fetch=True,
        )
        for thread_id, n, size in rows:
            counts[str(thread_id)] = _int(n)
            out.bytes[str(thread_id)] = out.bytes.get(str(thread_id), 0) + _int(size)
    return out
