"""Lifecycle operations of the SQL savers as sans-I/O plans: retention (with snapshots
materialized where the caller gave channel specs), TTL expiry, pins, the thread summary,
and giving freed space back to the file system.

Same model as the saver plans (`plan.py`): plans yield `Stmt`s and receive rows; the
retention of one thread
runs as one plan inside one write transaction, so no writer of that thread can slip a
checkpoint between the decision and the deletes (SQLite: BEGIN IMMEDIATE; PostgreSQL: the
thread's summary row is locked, and every put upserts that row).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from checkpointer.channels import BaseChannel
from checkpointer.errors import CorruptHistoryError
from checkpointer.lifecycle import (
    KeepLast,
    RetentionPolicy,
    SpaceReport,
    ThreadOutcome,
    ThreadSummary,
)
from checkpointer.savers.retention import (
    NamespaceShape,
    NodeShape,
    ThreadPlan,
    ThreadShape,
    delta_channels_of,
    materialize_values,
    parse_ts,
    plan_thread,
)
from checkpointer.savers.sql.deletion import inline_keys
from checkpointer.savers.sql.delta import delta_history_plan
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.plan import Plan, Stmt, each
from checkpointer.savers.sql.records import json_value, version_text
from checkpointer.savers.sql.schema import THREADS
from checkpointer.savers.sql.summaries import record_size, refresh_summaries_stmts
from checkpointer.serde import Serializer
from checkpointer.serde.located import ValueLocation, dumps_at, is_located
from checkpointer.types import INTERRUPT, make_config

# --------------------------------------------------------------------------- shapes
_SORT_COLUMNS = {
    "updated": "updated_at",
    "count": "checkpoint_count",
    "bytes": "bytes",
    "id": "thread_id",
}


def thread_ids_plan(d: Dialect, thread_ids: Sequence[str] | None) -> Plan[list[str]]:
    """The threads a retention run examines: those named, or every thread with a
    checkpoint (read from the checkpoints, so rows written around the saver count too)."""
    if thread_ids is not None:
        if isinstance(thread_ids, str):
            thread_ids = [thread_ids]
        return [str(t) for t in dict.fromkeys(thread_ids)]
    rows = yield Stmt(
        f"SELECT DISTINCT thread_id FROM {d.checkpoints} ORDER BY thread_id", (), fetch=True
    )
    return [str(r[0]) for r in rows]


def shape_plan(d: Dialect, thread_id: str) -> Plan[ThreadShape]:
    """One thread's shape in three statements: checkpoints (links, versions, ts, pin,
    size), stored values (key, size, base of a tail row), pending writes per checkpoint
    (count, size, whether one is an interrupt). No value is read."""
    params = {"t": thread_id}
    rows = yield Stmt(
        "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, "
        f"{d.versions_column('checkpoint')}, {d.json_field('checkpoint', 'ts')}, pinned, "
        f"{record_size(d, 'c')}, {d.counters_column('metadata')}, "
        f"{d.inline_keys_column('checkpoint')} "
        f"FROM {d.checkpoints} c WHERE thread_id = {d.p('t')}",
        params,
        fetch=True,
    )
    shape = ThreadShape(thread_id)
    for ns, cid, parent_id, versions, ts, pinned, size, counters, inline in rows:
        namespace = shape.namespaces.setdefault(str(ns), NamespaceShape())
        shaped = namespace.nodes[str(cid)] = NodeShape(
            parent_id=None if parent_id is None else str(parent_id),
            versions={k: version_text(v) for k, v in (json_value(versions) or {}).items()},
            ts=parse_ts(ts),
            pinned=bool(pinned),
            size=int(size or 0),
            delta_channels=delta_channels_of(json_value(counters)),
        )
        namespace.inline.update(
            (channel, version)
            for _, _, channel, version in inline_keys(thread_id, str(ns), shaped.versions, inline)
        )
    blob_rows = yield Stmt(
        f"SELECT checkpoint_ns, channel, version, {d.size('blob')}, base_version "
        f"FROM {d.blobs} WHERE thread_id = {d.p('t')}",
        params,
        fetch=True,
    )
    for ns, channel, version, size, base in blob_rows:
        namespace = shape.namespaces.setdefault(str(ns), NamespaceShape())
        namespace.blobs[(str(channel), str(version))] = int(size or 0)
        if base is not None:  # a tail row (`tails.py`): its base stays while it does
            namespace.bases[(str(channel), str(version))] = str(base)
    write_rows = yield Stmt(
        f"SELECT checkpoint_ns, checkpoint_id, count(*), sum({d.size('blob')}), "
        f"max(CASE WHEN channel = {d.p('interrupt')} THEN 1 ELSE 0 END) FROM {d.writes} "
        f"WHERE thread_id = {d.p('t')} GROUP BY checkpoint_ns, checkpoint_id",
        {**params, "interrupt": INTERRUPT},
        fetch=True,
    )
    for ns, cid, count, size, interrupted in write_rows:
        found = shape.namespaces.get(str(ns))
        node = found.nodes.get(str(cid)) if found else None
        if node is not None:  # writes of a checkpoint not saved yet stay untouched
            node.writes = int(count)
            node.writes_size = int(size or 0)
            node.interrupted = bool(interrupted)
    return shape


# --------------------------------------------------------------------------- retention
def _materialize_plan(
    d: Dialect,
    serde: Serializer,
    shape: ThreadShape,
    plan: ThreadPlan,
    specs: Mapping[str, BaseChannel] | None,
) -> Plan[tuple[list[tuple[str, str, str, str, bytes]], list[tuple[str, str, str]]]]:
    """Rebuild each value the plan wants stored, through the same history walk readers
    use; returns blob rows (ns, channel, version, type, data) and what failed."""
    rows: list[tuple[str, str, str, str, bytes]] = []
    failed: list[tuple[str, str, str]] = []
    located = is_located(serde)
    for item in plan.materialize:
        assert specs is not None
        node = shape.namespaces[item.ns].nodes[item.checkpoint_id]
        config = make_config(shape.thread_id, item.ns, item.checkpoint_id)
        histories: dict[str, Any] = {}
        try:
            histories = yield from delta_history_plan(d, serde, config, item.channels)
        except CorruptHistoryError:
            raise  # a loop in parent pointers: no plan for this thread can be trusted
        except Exception:  # an unloadable value: keep the ancestors instead
            histories = {}
        values, missing = materialize_values(specs, item.channels, histories)
        failed.extend((item.ns, item.checkpoint_id, ch) for ch in missing)
        for channel, value in values.items():
            version = node.versions[channel]
            if located:
                where = ValueLocation.blob(shape.thread_id, item.ns, channel, version)
                rows.append((item.ns, channel, version, *dumps_at(serde, value, where)))
            else:
                rows.append((item.ns, channel, version, *serde.dumps_typed(value)))
    return rows, failed


def retain_thread_plan(
    d: Dialect,
    serde: Serializer,
    thread_id: str,
    policy: RetentionPolicy,
    *,
    specs: Mapping[str, BaseChannel] | None,
    now: datetime,
    dry_run: bool,
) -> Plan[ThreadOutcome | None]:
    """Plan and (unless `dry_run`) apply a checkpoint-level policy to one thread: store
    the snapshots, delete checkpoints with their writes, delete values nothing references
    any more, refresh the summary. None when the thread has no checkpoint."""
    if not dry_run and (lock := d.lock_thread(thread_id)) is not None:
        yield lock
    shape = yield from shape_plan(d, thread_id)
    if not shape.namespaces or not shape.checkpoint_count:
        return None
    unmaterializable: dict[str, set[tuple[str, str]]] = {}
    while True:
        plan = plan_thread(shape, policy, now=now, specs=specs, unmaterializable=unmaterializable)
        blob_rows, failed = yield from _materialize_plan(d, serde, shape, plan, specs)
        if not failed:
            break
        for ns, cid, channel in failed:
            unmaterializable.setdefault(ns, set()).add((cid, channel))
    plan.outcome.bytes_added = sum(len(row[4]) for row in blob_rows)
    if dry_run or not plan.changes_anything:
        return plan.outcome
    if blob_rows:
        yield d.insert_blobs(thread_id, blob_rows)
    keys = [(thread_id, ns, cid) for ns, ids in plan.delete.items() for cid in sorted(ids)]
    if keys:
        columns = ("thread_id", "checkpoint_ns", "checkpoint_id")
        yield d.delete_keys(d.writes, columns, keys)
        yield d.delete_keys(d.checkpoints, columns, keys)
    garbage = [(thread_id, ns, ch, v) for ns, refs in plan.garbage.items() for ch, v in refs]
    if garbage:
        yield d.delete_keys(
            d.blobs, ("thread_id", "checkpoint_ns", "channel", "version"), sorted(garbage)
        )
    yield from each(refresh_summaries_stmts(d, [thread_id], now))
    return plan.outcome


def prune_keep_latest_plan(
    d: Dialect, serde: Serializer, thread_ids: Sequence[str], now: datetime
) -> Plan[None]:
    """prune(strategy="keep_latest"): `KeepLast(1)` on each thread, so every checkpoint
    kept (heads, and what their delta channels replay from) still reads back."""
    for thread_id in thread_ids:
        yield from retain_thread_plan(
            d, serde, thread_id, KeepLast(1), specs=None, now=now, dry_run=False
        )


# --------------------------------------------------------------------------- TTL
@dataclass(frozen=True, slots=True)
class Candidate:
    """A thread that may be deleted whole, as its summary row describes it."""

    thread_id: str
    checkpoints: int
    bytes: int
    pinned: int


def _candidates(rows: list[Any]) -> list[Candidate]:
    return [Candidate(str(t), int(n or 0), int(b or 0), int(p or 0)) for t, n, b, p in rows]


def idle_threads_plan(
    d: Dialect, cutoff: datetime, thread_ids: Sequence[str] | None
) -> Plan[list[Candidate]]:
    """Threads whose last write is older than `cutoff`, from the summary table alone."""
    params: dict[str, Any] = {"cutoff": d.ts_param(cutoff)}
    where = f"updated_at < {d.typed(d.p('cutoff'), 'ts')}"
    if thread_ids is not None:
        params["ids"] = d.list_param([str(t) for t in thread_ids])
        where += f" AND {d.in_list('thread_id', 'ids')}"
    rows = yield Stmt(
        f"SELECT thread_id, checkpoint_count, bytes, pinned_count FROM {d.threads} "
        f"WHERE {where} ORDER BY thread_id",
        params,
        fetch=True,
    )
    return _candidates(rows)


def expired_threads_plan(d: Dialect, now: datetime) -> Plan[list[Candidate]]:
    """Threads past their own TTL (`expires_at`, kept current on every write)."""
    rows = yield Stmt(
        f"SELECT thread_id, checkpoint_count, bytes, pinned_count FROM {d.threads} "
        f"WHERE expires_at <= {d.typed(d.p('now'), 'ts')} ORDER BY thread_id",
        {"now": d.ts_param(now)},
        fetch=True,
    )
    return _candidates(rows)


def pending_interrupt_plan(d: Dialect, thread_id: str) -> Plan[bool]:
    """Whether the thread waits on a human: an `__interrupt__` write on a checkpoint that
    has no child yet."""
    rows = yield Stmt(
        f"SELECT 1 FROM {d.writes} w WHERE w.thread_id = {d.p('t')} "
        f"AND w.channel = {d.p('interrupt')} AND EXISTS (SELECT 1 FROM {d.checkpoints} c "
        "WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns "
        "AND c.checkpoint_id = w.checkpoint_id) AND NOT EXISTS (SELECT 1 FROM "
        f"{d.checkpoints} k WHERE k.thread_id = w.thread_id AND k.checkpoint_ns = "
        "w.checkpoint_ns AND k.parent_checkpoint_id = w.checkpoint_id) LIMIT 1",
        {"t": thread_id, "interrupt": INTERRUPT},
        fetch=True,
    )
    return bool(rows)


def delete_whole_thread_plan(
    d: Dialect,
    candidate: Candidate,
    *,
    still: str,
    params: dict[str, Any],
    dry_run: bool,
) -> Plan[ThreadOutcome]:
    """Delete a thread whose summary row still satisfies `still` (checked under the lock,
    so a thread written since it was listed survives). Counts rows first, for the report."""
    outcome = ThreadOutcome(
        candidate.thread_id,
        checkpoints_before=candidate.checkpoints,
        bytes_freed=candidate.bytes,
        thread_deleted=True,
    )
    t = {"t": candidate.thread_id}
    if not dry_run:
        if (lock := d.lock_thread(candidate.thread_id)) is not None:
            yield lock
        rows = yield Stmt(
            f"SELECT checkpoint_count, bytes FROM {d.threads} WHERE thread_id = {d.p('t')} "
            f"AND pinned_count = 0 AND {still}",
            {**t, **params},
            fetch=True,
        )
        if not rows:
            return ThreadOutcome(
                candidate.thread_id,
                checkpoints_before=candidate.checkpoints,
                skipped="written to since it was selected",
            )
        outcome.checkpoints_before, outcome.bytes_freed = int(rows[0][0]), int(rows[0][1])
    counts = yield Stmt(
        f"SELECT (SELECT count(*) FROM {d.writes} WHERE thread_id = {d.p('t')}), "
        f"(SELECT count(*) FROM {d.blobs} WHERE thread_id = {d.p('t')})",
        t,
        fetch=True,
    )
    outcome.writes_deleted, outcome.blobs_deleted = int(counts[0][0]), int(counts[0][1])
    if not dry_run:
        yield from d.delete_thread_plan(candidate.thread_id).plan
    return outcome


# --------------------------------------------------------------------------- pins
def set_pin_plan(
    d: Dialect, thread_id: str, ns: str, checkpoint_id: str | None, pinned: bool
) -> Plan[str | None]:
    """Pin or unpin a checkpoint (the namespace's newest when no id), keep the summary's
    pin count current; returns the checkpoint id, None when there is no such checkpoint."""
    params: dict[str, Any] = {"t": thread_id, "ns": ns}
    where = f"thread_id = {d.p('t')} AND checkpoint_ns = {d.p('ns')}"
    if checkpoint_id is None:
        rows = yield Stmt(
            f"SELECT checkpoint_id FROM {d.checkpoints} WHERE {where} "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            params,
            fetch=True,
        )
    else:
        params["id"] = checkpoint_id
        rows = yield Stmt(
            f"SELECT checkpoint_id FROM {d.checkpoints} WHERE {where} "
            f"AND checkpoint_id = {d.p('id')}",
            params,
            fetch=True,
        )
    if not rows:
        return None
    found = str(rows[0][0])
    yield Stmt(
        f"UPDATE {d.checkpoints} SET pinned = {d.typed(d.p('pinned'), 'bool')} WHERE {where} "
        f"AND checkpoint_id = {d.p('id')}",
        {**params, "id": found, "pinned": pinned},
    )
    yield Stmt(
        f"UPDATE {d.threads} SET pinned_count = (SELECT count(*) FROM {d.checkpoints} c "
        f"WHERE c.thread_id = {d.p('t')} AND c.pinned) WHERE thread_id = {d.p('t')}",
        {"t": thread_id},
    )
    return found


def list_pinned_plan(d: Dialect, thread_id: str) -> Plan[list[tuple[str, str]]]:
    rows = yield Stmt(
        f"SELECT checkpoint_ns, checkpoint_id FROM {d.checkpoints} "
        f"WHERE thread_id = {d.p('t')} AND pinned ORDER BY checkpoint_id DESC, checkpoint_ns",
        {"t": thread_id},
        fetch=True,
    )
    return [(str(ns), str(cid)) for ns, cid in rows]


# --------------------------------------------------------------------------- summaries
def list_threads_plan(
    d: Dialect,
    *,
    sort: str,
    descending: bool,
    limit: int | None,
    offset: int,
    thread_ids: Sequence[str] | None,
) -> Plan[list[ThreadSummary]]:
    """A page of thread summaries, straight from the summary table (one indexed read)."""
    column = _SORT_COLUMNS[sort]
    direction = "DESC" if descending else "ASC"
    params: dict[str, Any] = {"offset": offset}
    where = ""
    if thread_ids is not None:
        params["ids"] = d.list_param([str(t) for t in thread_ids])
        where = f" WHERE {d.in_list('thread_id', 'ids')}"
    order = f"{column} {direction}"
    if column != "thread_id":
        order += f", thread_id {direction}"
    page = f" LIMIT {d.p('limit')} OFFSET {d.p('offset')}"
    # SQLite reads LIMIT -1 as "no limit"; PostgreSQL reads NULL so.
    params["limit"] = limit if limit is not None else (None if d.name == "postgresql" else -1)
    rows = yield Stmt(
        "SELECT thread_id, head_checkpoint_id, checkpoint_count, bytes, created_at, "
        f"updated_at, ttl_seconds, expires_at, pinned_count FROM {d.threads}{where} "
        f"ORDER BY {order}{page}",
        params,
        fetch=True,
    )
    out: list[ThreadSummary] = []
    for thread_id, head, count, size, created, updated, ttl, expires, pinned in rows:
        created_at, updated_at = d.decode_ts(created), d.decode_ts(updated)
        assert created_at is not None and updated_at is not None
        out.append(
            ThreadSummary(
                thread_id=str(thread_id),
                head_checkpoint_id=None if head is None else str(head),
                checkpoint_count=int(count),
                bytes=int(size),
                created_at=created_at,
                updated_at=updated_at,
                ttl=None if ttl is None else timedelta(seconds=float(ttl)),
                expires_at=d.decode_ts(expires),
                pinned=int(pinned),
            )
        )
    return out


def set_ttl_plan(
    d: Dialect, thread_id: str, ttl_seconds: float | None, now: datetime
) -> Plan[None]:
    """Set (or clear) a thread's TTL; the expiry counts from its last write. A thread not
    written yet gets its row now, so the TTL applies from its first write."""
    ttl = d.typed(d.p("ttl"), "float")
    yield Stmt(
        f"INSERT INTO {d.threads} (thread_id, created_at, updated_at, ttl_seconds, expires_at) "
        f"SELECT {d.typed(d.p('t'), 'text')}, {d.typed(d.p('now'), 'ts')}, "
        f"{d.typed(d.p('now'), 'ts')}, {ttl}, CASE WHEN {ttl} IS NULL THEN NULL "
        f"ELSE {d.add_seconds(d.typed(d.p('now'), 'ts'), ttl)} END WHERE true "
        "ON CONFLICT (thread_id) DO UPDATE SET ttl_seconds = excluded.ttl_seconds, "
        "expires_at = CASE WHEN excluded.ttl_seconds IS NULL THEN NULL "
        f"ELSE {d.add_seconds(f'{THREADS}.updated_at', 'excluded.ttl_seconds')} END",
        {"t": thread_id, "ttl": ttl_seconds, "now": d.ts_param(now)},
    )


def refresh_plan(d: Dialect, thread_ids: Sequence[str] | None, now: datetime) -> Plan[int]:
    """Recompute summaries (of every thread with rows when `thread_ids` is None)."""
    if thread_ids is None:
        rows = yield Stmt(
            f"SELECT thread_id FROM {d.checkpoints} UNION SELECT thread_id FROM {d.writes} "
            f"UNION SELECT thread_id FROM {d.threads}",
            (),
            fetch=True,
        )
        thread_ids = [str(r[0]) for r in rows]
    threads = sorted({str(t) for t in thread_ids})
    for start in range(0, len(threads), 500):
        yield from each(refresh_summaries_stmts(d, threads[start : start + 500], now))
    return len(threads)


# --------------------------------------------------------------------------- space
def sqlite_size_plan() -> Plan[tuple[int, int, int]]:
    """(file bytes, free bytes, auto_vacuum mode) of a SQLite database."""
    page_size = yield Stmt("PRAGMA page_size", (), fetch=True)
    pages = yield Stmt("PRAGMA page_count", (), fetch=True)
    free = yield Stmt("PRAGMA freelist_count", (), fetch=True)
    mode = yield Stmt("PRAGMA auto_vacuum", (), fetch=True)
    size = int(page_size[0][0])
    return int(pages[0][0]) * size, int(free[0][0]) * size, int(mode[0][0])


def sqlite_reclaim_plan(full: bool) -> Plan[SpaceReport]:
    """Shrink the file: incremental vacuum (when the file is in INCREMENTAL mode, as new
    files are) or, with `full`, a VACUUM that rewrites it and switches it to INCREMENTAL;
    then truncate the WAL. Runs outside any transaction."""
    before, _free, mode = yield from sqlite_size_plan()
    actions: list[str] = []
    if full:
        yield Stmt("PRAGMA auto_vacuum = INCREMENTAL", ())
        yield Stmt("VACUUM", ())
        actions.append("VACUUM")
    elif mode == 2:
        yield Stmt("PRAGMA incremental_vacuum", (), script=True)
        actions.append("PRAGMA incremental_vacuum")
    else:
        actions.append(
            "auto_vacuum is not INCREMENTAL in this file (it predates it): free pages are "
            "reused but the file does not shrink; run reclaim_space(full=True) once"
        )
    yield Stmt("PRAGMA wal_checkpoint(TRUNCATE)", (), fetch=True)
    actions.append("PRAGMA wal_checkpoint(TRUNCATE)")
    after, _free, _mode = yield from sqlite_size_plan()
    return SpaceReport(before, after, tuple(actions))


def postgres_reclaim_plan(d: Dialect, full: bool) -> Plan[SpaceReport]:
    """VACUUM the tables (FULL rewrites them and returns space to the OS, under an
    exclusive lock). Needs an autocommit connection: VACUUM cannot run in a transaction."""
    tables = [d.checkpoints, d.blobs, d.writes, d.threads]
    size_sql = "SELECT " + " + ".join(
        f"pg_total_relation_size({d.p(f't{i}')}::regclass)" for i in range(len(tables))
    )
    names = {f"t{i}": table for i, table in enumerate(tables)}
    before = yield Stmt(size_sql, names, fetch=True)
    verb = "VACUUM (FULL, ANALYZE)" if full else "VACUUM (ANALYZE)"
    for table in tables:
        yield Stmt(f"{verb} {table}", (), script=True)
    after = yield Stmt(size_sql, names, fetch=True)
    return SpaceReport(int(before[0][0]), int(after[0][0]), (f"{verb} on {len(tables)} tables",))
