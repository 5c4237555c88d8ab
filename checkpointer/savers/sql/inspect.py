"""Read-only inspection queries for the time-travel tools, as sans-I/O plans.

Same model as the saver plans (`plan.py`): each function is a plan that yields `Stmt`s
and receives rows, so one
text serves SQLite and PostgreSQL through the executors in `sync_exec` / `async_exec`.
Nothing here deserializes a value: plans return raw `(type, bytes)` pairs and the caller
decides how to load them (the tools load leniently, so one unloadable value never hides a
whole checkpoint). Only the few SQL fragments that differ between the two databases (byte
lengths, JSON fields, list aggregates) are spelled per dialect, in `inspect_sql.InspectSql`.

The plans live in modules by what they look at, and this module is the one place to import
them from:

- `inspect_threads`: threads (summaries, existence, runs) and checkpoint references;
- `inspect_tree`: the shape of a thread (skeleton, ancestors), no value read;
- `inspect_raw`: checkpoints, pending writes and delta history with values left raw;
- `inspect_stats`: bytes per table, thread and channel, and the footprint of threads;
- `inspect_sql`: what they share (dialect fragments, row reading, snapshot detection).
"""

from __future__ import annotations

from checkpointer.savers.sql.inspect_raw import (
    RawHistoryRow,
    RawTuple,
    RawWrite,
    raw_delta_history_plan,
    raw_pair,
    raw_tuple_plan,
    raw_writes_plan,
)
from checkpointer.savers.sql.inspect_sql import (
    COMPRESSED_MSGPACK,
    SNAPSHOT_PREFIX,
    json_doc,
    snapshot_marked,
)
from checkpointer.savers.sql.inspect_stats import (
    ChannelBytes,
    Footprint,
    Stats,
    TableStats,
    ThreadBytes,
    footprint_plan,
    stats_plan,
)
from checkpointer.savers.sql.inspect_threads import (
    THREAD_SORTS,
    ThreadSort,
    ThreadSummary,
    all_thread_ids_plan,
    existing_threads_plan,
    resolve_checkpoint_plan,
    thread_summaries_plan,
    threads_of_runs_plan,
)
from checkpointer.savers.sql.inspect_tree import (
    Ancestor,
    SkeletonNode,
    WriteInfo,
    ancestors_plan,
    skeleton_plan,
)

__all__ = [
    "COMPRESSED_MSGPACK",
    "SNAPSHOT_PREFIX",
    "THREAD_SORTS",
    "Ancestor",
    "ChannelBytes",
    "Footprint",
    "RawHistoryRow",
    "RawTuple",
    "RawWrite",
    "SkeletonNode",
    "Stats",
    "TableStats",
    "ThreadBytes",
    "ThreadSort",
    "ThreadSummary",
    "WriteInfo",
    "all_thread_ids_plan",
    "ancestors_plan",
    "existing_threads_plan",
    "footprint_plan",
    "json_doc",
    "raw_delta_history_plan",
    "raw_pair",
    "raw_tuple_plan",
    "raw_writes_plan",
    "resolve_checkpoint_plan",
    "skeleton_plan",
    "snapshot_marked",
    "stats_plan",
    "thread_summaries_plan",
    "threads_of_runs_plan",
]
