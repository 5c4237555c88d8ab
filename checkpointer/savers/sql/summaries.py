"""Thread summaries (`checkpointer_threads`): the upsert that adds a write's deltas, and
the recompute after deletes, copies and imports."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from checkpointer.savers.base import resolve_now
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.plan import Plan, Stmt, each
from checkpointer.savers.sql.schema import THREADS

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
    stmts = [
        Stmt(d.sql(("refresh_summaries",), build), params),
        Stmt(cleanup, {"threads": params["threads"]}),
    ]
    if d.stored_channels is not None:
        # A thread left without value rows lists no channel (see `schema.STORED_CHANNELS`).
        listed = d.stored_channels
        stmts.append(
            Stmt(
                f"DELETE FROM {listed} WHERE {d.in_list('thread_id', 'threads')} AND NOT "
                f"EXISTS (SELECT 1 FROM {d.blobs} b WHERE b.thread_id = {listed}.thread_id)",
                {"threads": params["threads"]},
            )
        )
    return stmts


def refresh_summaries_plan(d: Dialect, thread_ids: Sequence[str]) -> Plan[None]:
    """`refresh_summaries_stmts` as a plan: run it inside the transaction that changed the
    rows (any code that writes the tables without the saver API must call it)."""
    yield from each(refresh_summaries_stmts(d, thread_ids, resolve_now(None)))
