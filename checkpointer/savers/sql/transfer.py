"""Raw row transfer for export, import and fork, as sans-I/O plans.

Rows move exactly as stored: values stay `(type, bytes)` and are never deserialized, so a
transfer is lossless whatever classes the values name, and needs no allowlist. Reads page by
primary key (bounded memory on threads of any size); writes are `executemany` batches that
the caller runs inside one transaction.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from checkpointer.errors import CheckpointerError, CheckpointNotFoundError, ThreadExistsError
from checkpointer.ids import new_checkpoint_id
from checkpointer.savers.base import dumps_json
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inspect import ancestors_plan, json_doc
from checkpointer.savers.sql.plan import Plan, Stmt
from checkpointer.savers.sql.record_seal import SEAL_KEY, make_seal, resealed, verify_record
from checkpointer.savers.sql.records import record_json
from checkpointer.savers.sql.summaries import refresh_summaries_plan
from checkpointer.savers.sql.tails import Bases, bases_plan, load_tail
from checkpointer.serde.base import Serializer
from checkpointer.serde.encryption import bound_values_stmts
from checkpointer.serde.located import ValueLocation, dumps_at, is_located, load_at, relocate
from checkpointer.types import utc_now_iso

MAX_PATH = 10_000_000
"""Bound of the ancestor walk when copying a branch (guards against a parent loop)."""


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    run_id: str | None
    checkpoint: dict[str, Any]
    """The stored record: the checkpoint minus its id and channel values."""
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BlobRow:
    thread_id: str
    checkpoint_ns: str
    channel: str
    version: str
    type: str
    blob: bytes
    base_version: str | None = None
    """Set on a tail row (`tails.py`): the version of the whole row it continues, which
    must travel with it."""


@dataclass(frozen=True, slots=True)
class WriteRow:
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    idx: int
    task_path: str
    channel: str
    type: str
    blob: bytes


def record_text(record: dict[str, Any]) -> str:
    """A checkpoint record as the savers store it (`records.record_json`)."""
    return record_json(record)


# --------------------------------------------------------------------------- reads
def _pg(d: Dialect) -> bool:
    return d.name == "postgresql"


def _task_id_param(d: Dialect, name: str) -> str:
    return f"CAST({d.p(name)} AS uuid)" if _pg(d) else d.p(name)


def checkpoints_page_plan(
    d: Dialect, thread_id: str, after: tuple[str, str] | None, size: int
) -> Plan[list[CheckpointRow]]:
    """Checkpoints of a thread in (namespace, id) order, `size` after `after`."""
    params: dict[str, Any] = {"thread_id": thread_id, "size": size}
    sql = (
        "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, checkpoint, "
        f"metadata FROM {d.checkpoints} WHERE thread_id = {d.p('thread_id')}"
    )
    if after is not None:
        params["a_ns"], params["a_id"] = after
        sql += f" AND (checkpoint_ns, checkpoint_id) > ({d.p('a_ns')}, {d.p('a_id')})"
    rows = yield Stmt(
        sql + f" ORDER BY checkpoint_ns, checkpoint_id LIMIT {d.p('size')}", params, fetch=True
    )
    return [
        CheckpointRow(
            thread_id,
            str(ns),
            str(cid),
            None if pid is None else str(pid),
            None if run_id is None else str(run_id),
            json_doc(rec),
            json_doc(meta, metadata=True),
        )
        for ns, cid, pid, run_id, rec, meta in rows
    ]


def blobs_page_plan(
    d: Dialect, thread_id: str, after: tuple[str, str, str] | None, size: int
) -> Plan[list[BlobRow]]:
    """Channel values of a thread in primary-key order, `size` after `after`."""
    params: dict[str, Any] = {"thread_id": thread_id, "size": size}
    sql = (
        f"SELECT checkpoint_ns, channel, version, type, blob, base_version FROM {d.blobs} "
        f"WHERE thread_id = {d.p('thread_id')}"
    )
    if after is not None:
        params["a_ns"], params["a_ch"], params["a_v"] = after
        sql += (
            f" AND (checkpoint_ns, channel, version) > ({d.p('a_ns')}, {d.p('a_ch')}, {d.p('a_v')})"
        )
    rows = yield Stmt(
        sql + f" ORDER BY checkpoint_ns, channel, version LIMIT {d.p('size')}", params, True
    )
    return [
        BlobRow(thread_id, str(ns), str(ch), str(v), str(t), bytes(b), _opt(base))
        for ns, ch, v, t, b, base in rows
    ]


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


def writes_page_plan(
    d: Dialect, thread_id: str, after: tuple[str, str, str, int] | None, size: int
) -> Plan[list[WriteRow]]:
    """Pending writes of a thread in primary-key order, `size` after `after`."""
    params: dict[str, Any] = {"thread_id": thread_id, "size": size}
    sql = (
        f"SELECT checkpoint_ns, checkpoint_id, {d.task_id_text('task_id')}, idx, task_path, "
        f"channel, type, blob FROM {d.writes} WHERE thread_id = {d.p('thread_id')}"
    )
    if after is not None:
        params["a_ns"], params["a_id"] = after[0], after[1]
        params["a_task"], params["a_idx"] = d.encode_write_key(after[2], after[3])
        sql += (
            " AND (checkpoint_ns, checkpoint_id, task_id, idx) > "
            f"({d.p('a_ns')}, {d.p('a_id')}, {_task_id_param(d, 'a_task')}, {d.p('a_idx')})"
        )
    rows = yield Stmt(
        sql + f" ORDER BY checkpoint_ns, checkpoint_id, task_id, idx LIMIT {d.p('size')}",
        params,
        fetch=True,
    )
    return [
        WriteRow(
            thread_id,
            str(ns),
            str(cid),
            *d.decode_write_key(tid, idx),
            str(path or ""),
            str(ch),
            str(t),
            bytes(b),
        )
        for ns, cid, tid, idx, path, ch, t, b in rows
    ]


# --------------------------------------------------------------------------- writes
def insert_checkpoints_stmt(d: Dialect, rows: Sequence[CheckpointRow]) -> Stmt:
    """Insert checkpoint rows as they are (a row already there is left alone)."""
    params = []
    for r in rows:
        meta = d.check_metadata(dumps_json(r.metadata))
        params.append(
            {
                "thread_id": r.thread_id,
                "checkpoint_ns": r.checkpoint_ns,
                "checkpoint_id": r.checkpoint_id,
                "parent_id": r.parent_checkpoint_id,
                "run_id": r.run_id,
                "record": record_text(r.checkpoint),
                "metadata": meta,
            }
        )
    return Stmt(
        f"INSERT INTO {d.checkpoints} (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, run_id, checkpoint, metadata) VALUES ("
        f"{d.p('thread_id')}, {d.p('checkpoint_ns')}, {d.p('checkpoint_id')}, "
        f"{d.p('parent_id')}, {d.p('run_id')}, {d.json_param('record')}, "
        f"{d.json_param('metadata')}) ON CONFLICT DO NOTHING",
        params,
        many=True,
    )


def insert_blobs_stmt(d: Dialect, rows: Sequence[BlobRow]) -> Stmt:
    """Insert value rows as they are, tail rows with their base version (a row already
    there is left alone)."""
    return Stmt(
        f"INSERT INTO {d.blobs} (thread_id, checkpoint_ns, channel, version, type, blob, "
        f"base_version) VALUES ({d.p('thread_id')}, {d.p('checkpoint_ns')}, "
        f"{d.p('channel')}, {d.p('version')}, {d.p('type')}, {d.p('blob')}, "
        f"{d.text(d.p('base'))}) ON CONFLICT DO NOTHING",
        [
            {
                "thread_id": r.thread_id,
                "checkpoint_ns": r.checkpoint_ns,
                "channel": r.channel,
                "version": r.version,
                "type": r.type,
                "blob": r.blob,
                "base": r.base_version,
            }
            for r in rows
        ],
        many=True,
    )


def insert_writes_stmt(d: Dialect, rows: Sequence[WriteRow], *, replace: bool = False) -> Stmt:
    """Insert writes in their original slots (`idx`) with their task paths (`replace`:
    overwrite a write already in that slot, as `copy_thread` does)."""
    conflict = (
        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
        "task_path = excluded.task_path, channel = excluded.channel, type = excluded.type, "
        "blob = excluded.blob"
        if replace
        else "ON CONFLICT DO NOTHING"
    )
    return Stmt(
        f"INSERT INTO {d.writes} (thread_id, checkpoint_ns, checkpoint_id, task_id, task_name, "
        f"idx, task_path, channel, type, blob) VALUES ({d.p('thread_id')}, "
        f"{d.p('checkpoint_ns')}, {d.p('checkpoint_id')}, {_task_id_param(d, 'task_id')}, "
        f"{d.text(d.p('task_name'))}, {d.p('idx')}, {d.p('task_path')}, {d.p('channel')}, "
        f"{d.p('type')}, {d.p('blob')}) " + conflict,
        [
            {
                "thread_id": r.thread_id,
                "checkpoint_ns": r.checkpoint_ns,
                "checkpoint_id": r.checkpoint_id,
                "task_id": d.encode_write_key(r.task_id, r.idx)[0],
                "task_name": d.task_name(r.task_id),
                "idx": d.encode_write_key(r.task_id, r.idx)[1],
                "task_path": r.task_path,
                "channel": r.channel,
                "type": r.type,
                "blob": r.blob,
            }
            for r in rows
        ],
        many=True,
    )


def refresh_thread_summaries_plan(d: Dialect, thread_ids: Sequence[str]) -> Plan[None]:
    """Bring per-thread summary rows in line with rows written here directly
    (`summaries.refresh_summaries_plan`). Run it in the transaction that wrote the rows."""
    if thread_ids:
        yield from refresh_summaries_plan(d, sorted(set(thread_ids)))


def insert_rows_plan(
    d: Dialect,
    checkpoints: Sequence[CheckpointRow] = (),
    blobs: Sequence[BlobRow] = (),
    writes: Sequence[WriteRow] = (),
) -> Plan[None]:
    if checkpoints:
        yield insert_checkpoints_stmt(d, checkpoints)
    if blobs:
        yield insert_blobs_stmt(d, blobs)
    if writes:
        yield insert_writes_stmt(d, writes)


# --------------------------------------------------------------------------- relocation
RELOCATE_PAGE = 500
"""Values re-sealed per statement when a copy moves them to another thread."""


def _relocated_blob(serde: Serializer, row: BlobRow, target: str, bases: Bases) -> BlobRow:
    def at(thread_id: str, version: str = row.version) -> ValueLocation:
        return ValueLocation.blob(thread_id, row.checkpoint_ns, row.channel, version)

    if row.base_version is None:
        tag, data = relocate(serde, (row.type, row.blob), at(row.thread_id), at(target))
        return BlobRow(target, row.checkpoint_ns, row.channel, row.version, tag, data)
    # A tail row (`tails.py`) is stored whole: read with its base at the source, written
    # at the target, so the copy needs no base (serializers that bind values never write
    # tails, and keep none).
    key = (row.thread_id, row.checkpoint_ns, row.channel, row.version)
    value = load_tail(
        key,
        (row.type, row.blob),
        bases.get(key),
        lambda pair, version, _keep: load_at(serde, pair, at(row.thread_id, version)),
        at(row.thread_id).where(),
    )
    tag, data = dumps_at(serde, value, at(target))
    return BlobRow(target, row.checkpoint_ns, row.channel, row.version, tag, data)


def _relocated_write(serde: Serializer, row: WriteRow, target: str) -> WriteRow:
    def at(thread_id: str) -> ValueLocation:
        return ValueLocation.write(
            thread_id, row.checkpoint_ns, row.checkpoint_id, row.task_id, row.idx, row.channel
        )

    tag, data = relocate(serde, (row.type, row.blob), at(row.thread_id), at(target))
    return WriteRow(
        target,
        row.checkpoint_ns,
        row.checkpoint_id,
        row.task_id,
        row.idx,
        row.task_path,
        row.channel,
        tag,
        data,
    )


def relocate_values_plan(
    d: Dialect,
    serde: Serializer,
    source: str,
    target: str,
    *,
    blob_keys: Callable[[BlobRow], bool] | None = None,
    write_keys: Callable[[WriteRow], bool] | None = None,
    replace_writes: bool = False,
) -> Plan[None]:
    """Copy the values (blobs, then pending writes) of thread `source` that the filters
    accept into `target`, each read at its own location and stored at the target's: what a
    copy needs when the serializer binds values to their location (`is_located`). Tail
    rows are stored whole (their value read with their base), so they need no base in the
    target. Pages of `RELOCATE_PAGE` rows, so memory stays bounded; run it in the copy's
    transaction."""
    blob_after: tuple[str, str, str] | None = None
    while True:
        blobs = yield from blobs_page_plan(d, source, blob_after, RELOCATE_PAGE)
        chosen = [r for r in blobs if blob_keys is None or blob_keys(r)]
        tails = [
            (r.thread_id, r.checkpoint_ns, r.channel, r.version)
            for r in chosen
            if r.base_version is not None
        ]
        bases = (yield from bases_plan(d, tails)) if tails else {}
        moved = [_relocated_blob(serde, r, target, bases) for r in chosen]
        if moved:
            yield insert_blobs_stmt(d, moved)
        if len(blobs) < RELOCATE_PAGE:
            break
        blob_after = (blobs[-1].checkpoint_ns, blobs[-1].channel, blobs[-1].version)
    write_after: tuple[str, str, str, int] | None = None
    while True:
        writes = yield from writes_page_plan(d, source, write_after, RELOCATE_PAGE)
        moved_writes = [
            _relocated_write(serde, r, target)
            for r in writes
            if write_keys is None or write_keys(r)
        ]
        if moved_writes:
            yield insert_writes_stmt(d, moved_writes, replace=replace_writes)
        if len(writes) < RELOCATE_PAGE:
            break
        last = writes[-1]
        write_after = (last.checkpoint_ns, last.checkpoint_id, last.task_id, last.idx)


def reseal_records_plan(d: Dialect, serde: Serializer, source: str, target: str) -> Plan[None]:
    """Re-seal the checkpoint records just copied from `source` into `target`
    (`record_seal.py`): a seal names its thread, so a copied one would not open there.
    Each seal is checked at the source first. Records without a seal are left as they are.
    Pages of `RELOCATE_PAGE` records; run it in the copy's transaction."""
    after: tuple[str, str] | None = None
    while True:
        params: dict[str, Any] = {"dst": target, "n": RELOCATE_PAGE}
        cond = f"thread_id = {d.p('dst')}"
        if after is not None:
            cond += (
                f" AND (checkpoint_ns > {d.p('ans')} OR (checkpoint_ns = {d.p('ans')} "
                f"AND checkpoint_id > {d.p('aid')}))"
            )
            params.update(ans=after[0], aid=after[1])
        rows = yield Stmt(
            f"SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint FROM "
            f"{d.checkpoints} WHERE {cond} ORDER BY checkpoint_ns, checkpoint_id "
            f"LIMIT {d.p('n')}",
            params,
            fetch=True,
        )
        for ns, checkpoint_id, parent_id, record in rows:
            fields = resealed(serde, json_doc(record), source, target, ns, checkpoint_id, parent_id)
            if fields is not None:
                yield Stmt(
                    f"UPDATE {d.checkpoints} SET checkpoint = {d.json_param('rec')} WHERE "
                    f"thread_id = {d.p('dst')} AND checkpoint_ns = {d.p('ns')} AND "
                    f"checkpoint_id = {d.p('c')}",
                    {"rec": record_json(fields), "dst": target, "ns": ns, "c": checkpoint_id},
                )
        if len(rows) < RELOCATE_PAGE:
            break
        after = (rows[-1][0], rows[-1][1])


def copy_thread_relocating_plan(
    d: Dialect, serde: Serializer, source: str, target: str
) -> Plan[None]:
    """`copy_thread` for serializers that bind values to their location: the checkpoint
    rows are copied in SQL as the dialect's plan does (same conflict rules), the values are
    re-sealed for the target thread, then the target's summary is refreshed."""
    params = {"src": source, "dst": target}
    yield Stmt(
        f"INSERT INTO {d.checkpoints} (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, run_id, checkpoint, metadata, pinned) "
        f"SELECT {d.p('dst')}, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
        f"checkpoint, metadata, pinned FROM {d.checkpoints} WHERE thread_id = {d.p('src')} "
        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
        "parent_checkpoint_id = excluded.parent_checkpoint_id, " + d.checkpoint_upsert_values(),
        params,
    )
    yield from reseal_records_plan(d, serde, source, target)
    yield from relocate_values_plan(d, serde, source, target, replace_writes=True)
    yield from refresh_thread_summaries_plan(d, [target])


def copy_thread_guarded_plan(
    d: Dialect, source: str, target: str, copy: Plan[None], *, replace: bool
) -> Plan[None]:
    """`copy` (the copy's own statements), run only once the target is known to hold no
    checkpoint: ThreadExistsError when it does, unless `replace`, which deletes the target
    first. Meant for one transaction, so a refused copy writes nothing and a replacing
    one is all or nothing."""
    rows = yield Stmt(
        f"SELECT 1 FROM {d.checkpoints} WHERE thread_id = {d.p('t')} LIMIT 1",
        {"t": target},
        fetch=True,
    )
    if rows and not replace:
        raise ThreadExistsError(target)
    if replace:
        yield from d.delete_thread_plan(target).plan
    yield from copy


def copy_bases_stmt(d: Dialect, source: str, target: str, ns: str) -> Stmt:
    """Copy from `source` the bases of the tail rows (`tails.py`) of `target`'s namespace
    `ns` that `target` lacks: a copy of some values must bring what they continue, even
    when no copied checkpoint names the base's own version."""
    return Stmt(
        f"INSERT INTO {d.blobs} (thread_id, checkpoint_ns, channel, version, type, blob) "
        f"SELECT {d.p('dst')}, b.checkpoint_ns, b.channel, b.version, b.type, b.blob "
        f"FROM {d.blobs} b WHERE b.thread_id = {d.p('src')} AND b.checkpoint_ns = {d.p('ns')} "
        "AND b.base_version IS NULL AND EXISTS (SELECT 1 FROM "
        f"{d.blobs} t WHERE t.thread_id = {d.p('dst')} AND t.checkpoint_ns = {d.p('ns')} "
        "AND t.channel = b.channel AND t.base_version = b.version) ON CONFLICT DO NOTHING",
        {"src": source, "dst": target, "ns": ns},
    )


def refuse_bound_values_plan(d: Dialect, thread_id: str, action: str) -> Plan[None]:
    """CheckpointerError when the thread holds values encrypted *and bound to their
    location*: copied as bytes to another thread they would not decrypt there, and only a
    saver with the keys (`EncryptedSerializer`) can re-seal them. What the tools, which
    have no keys, check before copying a thread."""
    for stmt in bound_values_stmts(d, thread_id):
        if (yield stmt):
            raise CheckpointerError(
                f"cannot {action}: thread {thread_id!r} holds values encrypted and bound to "
                "their thread, which would not decrypt in the copy; copy it through a saver "
                "configured with its EncryptedSerializer (saver.copy_thread)"
            )


# --------------------------------------------------------------------------- fork
@dataclass(frozen=True, slots=True)
class ForkResult:
    """What a fork made: the thread and head checkpoint to continue from."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    source_checkpoint_id: str
    checkpoints: int
    """Checkpoints written (1 for a fork in place, the copied branch otherwise)."""
    pending_writes_copied: bool


def _has_child_plan(d: Dialect, thread_id: str, ns: str, checkpoint_id: str) -> Plan[bool]:
    rows = yield Stmt(
        f"SELECT 1 FROM {d.checkpoints} WHERE thread_id = {d.p('t')} AND checkpoint_ns = "
        f"{d.p('ns')} AND parent_checkpoint_id = {d.p('c')} LIMIT 1",
        {"t": thread_id, "ns": ns, "c": checkpoint_id},
        fetch=True,
    )
    return bool(rows)


def fork_to_thread_plan(
    d: Dialect,
    source: str,
    target: str,
    ns: str,
    checkpoint_id: str,
    serde: Serializer | None = None,
) -> Plan[ForkResult]:
    """Copy the branch ending at `checkpoint_id` (it and every ancestor, with their values
    and pending writes) into the new thread `target`, whose head it becomes.

    The head keeps its own pending writes only when it has no child in `source`: then the
    new thread resumes exactly where the source stood (finished tasks, interrupts). When it
    has a child those writes made that child, so they stay behind and the next run of the
    new thread runs the step after the head again. Ancestors keep all their writes: the
    head's delta channels are rebuilt from them, back to the nearest snapshot.

    Values are copied as bytes, unless `serde` binds them to their location (encryption):
    then each is re-sealed for the new thread. Without such a serializer a thread holding
    bound values is refused rather than copied into an unreadable thread.
    """
    relocating = serde is not None and is_located(serde)
    taken = yield Stmt(
        f"SELECT 1 FROM {d.checkpoints} WHERE thread_id = {d.p('t')} LIMIT 1",
        {"t": target},
        fetch=True,
    )
    if taken:
        raise CheckpointerError(
            f"thread {target!r} already exists; delete it first or fork to another thread"
        )
    path = yield from ancestors_plan(d, source, ns, checkpoint_id, MAX_PATH)
    if not path:
        raise CheckpointNotFoundError(f"no checkpoint {checkpoint_id!r} in thread {source!r}")
    if not relocating:
        yield from refuse_bound_values_plan(d, source, f"fork thread {source!r} to {target!r}")
    has_child = yield from _has_child_plan(d, source, ns, checkpoint_id)
    ids = [a.checkpoint_id for a in path]
    params: dict[str, Any] = {"src": source, "dst": target, "ns": ns}
    scope = (
        f"thread_id = {d.p('src')} AND checkpoint_ns = {d.p('ns')} "
        f"AND {d.in_list('checkpoint_id', 'ids')}"
    )
    yield Stmt(
        f"INSERT INTO {d.checkpoints} (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, run_id, checkpoint, metadata) SELECT "
        f"{d.p('dst')}, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, checkpoint, "
        f"metadata FROM {d.checkpoints} WHERE {scope}",
        {**params, "ids": d.list_param(ids)},
    )
    # The values the copied checkpoints point at: one primary-key lookup each.
    keys = yield Stmt(
        f"SELECT DISTINCT v.key, {d.versions_value('v')} FROM {d.checkpoints} c "
        f"{d.versions_join('c.checkpoint', 'v')} WHERE c.thread_id = {d.p('dst')} "
        f"AND c.checkpoint_ns = {d.p('ns')}",
        params,
        fetch=True,
    )
    write_ids = ids if not has_child else ids[1:]
    if relocating:
        assert serde is not None
        wanted_blobs = {(str(ch), str(v)) for ch, v in keys}
        wanted_writes = set(write_ids)
        yield from reseal_records_plan(d, serde, source, target)
        yield from relocate_values_plan(
            d,
            serde,
            source,
            target,
            blob_keys=lambda r: r.checkpoint_ns == ns and (r.channel, r.version) in wanted_blobs,
            write_keys=lambda r: r.checkpoint_ns == ns and r.checkpoint_id in wanted_writes,
        )
        yield from refresh_thread_summaries_plan(d, [target])
        return ForkResult(target, ns, checkpoint_id, checkpoint_id, len(ids), not has_child)
    if keys:
        yield Stmt(
            f"INSERT INTO {d.blobs} (thread_id, checkpoint_ns, channel, version, type, blob, "
            f"base_version) SELECT {d.p('dst')}, checkpoint_ns, channel, version, type, blob, "
            f"base_version FROM {d.blobs} "
            f"WHERE thread_id = {d.p('src')} AND checkpoint_ns = {d.p('ns')} "
            f"AND channel = {d.p('ch')} AND version = {d.p('v')} ON CONFLICT DO NOTHING",
            [{**params, "ch": str(ch), "v": str(v)} for ch, v in keys],
            many=True,
        )
        yield copy_bases_stmt(d, source, target, ns)
    if write_ids:
        yield Stmt(
            f"INSERT INTO {d.writes} (thread_id, checkpoint_ns, checkpoint_id, task_id, "
            f"task_name, idx, task_path, channel, type, blob) SELECT {d.p('dst')}, "
            "checkpoint_ns, checkpoint_id, task_id, task_name, idx, task_path, channel, type, "
            f"blob FROM {d.writes} "
            f"WHERE {scope}",
            {**params, "ids": d.list_param(write_ids)},
        )
    yield from refresh_thread_summaries_plan(d, [target])
    return ForkResult(target, ns, checkpoint_id, checkpoint_id, len(ids), not has_child)


def fork_in_place_plan(
    d: Dialect,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    *,
    new_id: Callable[[str | None], str] | None = None,
    serde: Serializer | None = None,
) -> Plan[ForkResult]:
    """Add a copy of `checkpoint_id` as the new head of its thread: same parent, same
    channel versions (so the same stored values and the same delta history, readable with
    no reducer), `source: "fork"` and `forked_from` in its metadata, no run id, no pending
    writes. The next run of the thread continues from it, running the step after the
    forked checkpoint again; the old branch stays as it was.

    A sealed record (`record_seal.py`) names its checkpoint id, so the copy is re-sealed
    for the new id, which needs the saver's serializer (`serde`): without it (the
    command-line tools hold no keys) the fork is refused rather than made unreadable."""
    key = {"t": thread_id, "ns": ns, "c": checkpoint_id}
    rows = yield Stmt(
        f"SELECT parent_checkpoint_id, checkpoint, metadata FROM {d.checkpoints} WHERE "
        f"thread_id = {d.p('t')} AND checkpoint_ns = {d.p('ns')} AND checkpoint_id = {d.p('c')}",
        key,
        fetch=True,
    )
    if not rows:
        raise CheckpointNotFoundError(f"no checkpoint {checkpoint_id!r} in thread {thread_id!r}")
    parent_id, record, metadata = rows[0]
    latest = yield Stmt(
        f"SELECT MAX(checkpoint_id) FROM {d.checkpoints} WHERE thread_id = {d.p('t')} "
        f"AND checkpoint_ns = {d.p('ns')}",
        key,
        fetch=True,
    )
    fork_id = (new_id or newer_checkpoint_id)(latest[0][0] if latest else None)
    rec = json_doc(record)
    if SEAL_KEY in rec:
        if serde is None or not is_located(serde):
            raise CheckpointerError(
                f"checkpoint {checkpoint_id!r} of thread {thread_id!r} is sealed (an encrypted "
                "database): fork it through a saver holding the keys, not the tools"
            )
        verify_record(serde, thread_id, ns, checkpoint_id, rec, parent_id)
        rec[SEAL_KEY] = make_seal(serde, thread_id, ns, fork_id, rec, parent_id)
    rec["ts"] = utc_now_iso()
    meta = json_doc(metadata, metadata=True)
    meta.pop("run_id", None)
    meta.update(source="fork", forked_from=checkpoint_id)
    row = CheckpointRow(
        thread_id, ns, fork_id, None if parent_id is None else str(parent_id), None, rec, meta
    )
    yield insert_checkpoints_stmt(d, [row])
    yield from refresh_thread_summaries_plan(d, [thread_id])
    return ForkResult(thread_id, ns, fork_id, checkpoint_id, 1, False)


_GREGORIAN_OFFSET = 0x01B21DD213814000
"""100 ns intervals between 1582-10-15 (the UUID epoch) and 1970-01-01."""


def _uuid6_now() -> str:
    """An RFC 9562 version-6 UUID for now: the id scheme LangGraph's checkpoints use."""
    ts = time.time_ns() // 100 + _GREGORIAN_OFFSET
    value = ((ts >> 12) & ((1 << 48) - 1)) << 80
    value |= 0x6 << 76
    value |= (ts & 0xFFF) << 64
    value |= 0b10 << 62
    value |= secrets.randbits(62)
    return str(uuid.UUID(int=value))


def newer_checkpoint_id(latest: str | None) -> str:
    """A checkpoint id that sorts after `latest`, so it becomes the thread's head.

    Ours (UUIDv7) when it does; in a thread written by LangGraph (UUIDv6 ids, which sort
    above v7 ones) a v6 id for now; and if a skewed clock made `latest` look like the
    future, `latest` plus one in its random bits.
    """
    candidates = [new_checkpoint_id()]
    try:
        if latest is not None and uuid.UUID(latest).version == 6:
            candidates.insert(0, _uuid6_now())
    except ValueError:
        pass
    if latest is None:
        return candidates[-1]
    for candidate in candidates:
        if candidate > latest:
            return candidate
    try:
        bumped = str(uuid.UUID(int=uuid.UUID(latest).int + 1 + int.from_bytes(os.urandom(1))))
    except ValueError:
        bumped = latest + "-fork"
    if bumped > latest:
        return bumped
    raise CheckpointerError(f"cannot make a checkpoint id that sorts after {latest!r}")
