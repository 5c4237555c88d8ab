"""Inspection plans that read stored values without loading them.

One checkpoint with the value of each channel at its version and its pending writes, the
pending writes of some checkpoints, and the savers' delta-history walk: all as raw
`(type, bytes)` pairs, so the tools can load each leniently (one unloadable value never
hides a whole checkpoint). Tail rows among a checkpoint's values come back joined whole,
and values kept inline in a record as the value rows they stand for, so whoever shows them
needs to know neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpointer.errors import CorruptValueError, DeserializationError
from checkpointer.savers.base import history_loop
from checkpointer.savers.sql.delta import delta_history_chunks, delta_walk_plan
from checkpointer.savers.sql.delta_sql import WALK_BOUND_REACHED
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inline import RECORD_KEY as INLINE_KEY
from checkpointer.savers.sql.inline import from_sql, stored_form
from checkpointer.savers.sql.inspect_sql import json_doc
from checkpointer.savers.sql.plan import Plan, Row, Stmt
from checkpointer.savers.sql.records import version_text
from checkpointer.savers.sql.tails import bases_plan, is_tail, join_whole
from checkpointer.types import RunnableConfig, checkpoint_ns_of, thread_id_of


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
