"""Inspection plans that measure what the database holds.

Rows and bytes per table, per thread and per channel (`checkpointer stats`, with the
channels that stored snapshots told apart as delta channels, and the size on disk when
looking at the whole database), and the footprint of some threads, to report what an
operation removed or would remove.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inspect_sql import (
    COMPRESSED_MSGPACK,
    SNAPSHOT_PREFIX,
    InspectSql,
    as_int,
    as_opt_int,
    snapshot_marked,
)
from checkpointer.savers.sql.plan import Plan, Stmt


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
    q = InspectSql(d)
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
            disk = {str(name): as_int(size) for name, size in disk_rows}
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
            on_disk = as_opt_int(disk_rows[0][0]) if disk_rows else None
        tables.append(TableStats(name, as_int(rows[0][0]), as_int(rows[0][1]), on_disk))

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
        ThreadBytes(str(t), as_int(n), as_int(cb), as_int(bb), as_int(wb))
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
        ChannelBytes(
            str(ch), as_int(bn), as_int(bb), as_int(sn), as_int(sb), as_int(wn), as_int(wb)
        )
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
            database_bytes, free_bytes = as_int(size_rows[0][0]), as_int(size_rows[0][1])
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
    q = InspectSql(d)
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
        out.checkpoints[(str(thread_id), str(ns), str(cid))] = as_opt_int(step)
        out.bytes[str(thread_id)] = out.bytes.get(str(thread_id), 0) + as_int(size)
    for table, counts in ((d.blobs, out.blobs), (d.writes, out.writes)):
        rows = yield Stmt(
            f"SELECT thread_id, COUNT(*), COALESCE(SUM({q.size('blob')}), 0) FROM {table} "
            f"{where} GROUP BY thread_id",
            params,
            fetch=True,
        )
        for thread_id, n, size in rows:
            counts[str(thread_id)] = as_int(n)
            out.bytes[str(thread_id)] = out.bytes.get(str(thread_id), 0) + as_int(size)
    return out
