"""Inspection plans over threads, reading no checkpoint value.

A summary line per thread (`checkpointer threads`: checkpoints, last step and update,
bytes stored), which threads exist or which runs made them, and what a checkpoint
reference names (the head, an id, or a unique prefix or suffix of one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inspect_sql import InspectSql, as_int, as_opt_int
from checkpointer.savers.sql.plan import Plan, Stmt

ThreadSort = Literal["updated", "count", "bytes", "id"]
THREAD_SORTS: tuple[str, ...] = ("updated", "count", "bytes", "id")


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
    q = InspectSql(d)
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
            checkpoints=as_int(n),
            last_checkpoint_id=str(last_id),
            last_step=as_opt_int(last_step),
            last_updated=None if last_ts is None else str(last_ts),
            bytes=as_int(size),
        )
        for thread_id, nss, n, last_id, last_step, last_ts, size in rows
    ]
    return as_int(total_rows[0][0]) if total_rows else 0, summaries


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
