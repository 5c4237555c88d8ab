"""Inspection plans over the shape of a thread's checkpoints, reading no channel value.

The skeleton of one namespace (every checkpoint with its links, record, metadata and the
channels of its pending writes) and the ancestors of one checkpoint, found by following
parent pointers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inspect_sql import InspectSql, as_opt_int, json_doc
from checkpointer.savers.sql.plan import Plan, Stmt
from checkpointer.types import INTERRUPT


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
    q = InspectSql(d)
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
        Ancestor(int(depth), str(cid), None if pid is None else str(pid), as_opt_int(step))
        for depth, cid, pid, step in rows
    ]
