"""Delta-channel history: the one statement that walks the parent chain for every delta
channel at once, its loop guard, and the decoder of its rows (DESIGN.md 3.3)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from operator import itemgetter

from checkpointer.errors import CorruptValueError
from checkpointer.savers.base import history_loop
from checkpointer.savers.sql.delta_runs import RUNS_FALLBACK, delta_runs_sql
from checkpointer.savers.sql.delta_sql import (
    MAX_CHANNELS_PER_QUERY,
    SEED_BASE,
    WALK_BOUND_REACHED,
    WALK_RECORD,
    WALK_UNREADABLE,
    delta_history_sql,
    history_params,
)
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inline import (
    from_sql,
    serde_inlines,
)
from checkpointer.savers.sql.plan import Plan, Row, Stmt
from checkpointer.savers.sql.record_seal import verify_record
from checkpointer.savers.sql.records import inline_loader, json_object, write_value
from checkpointer.savers.sql.tails import (
    TAIL_PREFIX,
    BaseKey,
    Bases,
    Typed,
    bases_plan,
    load_stored,
    load_tail,
)
from checkpointer.serde import Serializer
from checkpointer.serde.located import (
    batch_loader,
    is_located,
    load_at,
    plain_batch_loader,
)
from checkpointer.serde.value_cache import ValueCache
from checkpointer.serde.value_types import TAG_MSGPACK
from checkpointer.types import (
    DeltaChannelHistory,
    RunnableConfig,
    checkpoint_id_of,
    checkpoint_ns_of,
    config_address,
    thread_id_of,
)


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
    params = history_params(thread_id, ns, checkpoint_id, channels)
    params["bound"] = bound
    n, latest = len(channels), checkpoint_id is None
    sql = d.sql(("delta", n, latest, records), lambda: delta_history_sql(d, n, latest, records))
    return Stmt(sql, params, fetch=True)


def delta_runs_stmt(d: Dialect, config: RunnableConfig, channels: Sequence[str]) -> Stmt:
    """`delta_history_stmt`'s rows by range scans over runs (`delta_runs.py`), or one
    `RUNS_FALLBACK` row where only the pointer walk can answer. Records are not verified
    here: a serializer that seals them reads through `delta_history_stmt`."""
    if len(channels) > MAX_CHANNELS_PER_QUERY:
        raise ValueError(f"at most {MAX_CHANNELS_PER_QUERY} channels per statement")
    thread_id, ns, checkpoint_id = config_address(config)
    params = history_params(thread_id, ns, checkpoint_id, channels)
    params["bound"] = None
    n, latest = len(channels), checkpoint_id is None
    sql = d.sql(("delta_runs", n, latest), lambda: delta_runs_sql(d, n, latest))
    return Stmt(sql, params, fetch=True)


_DEPTH = itemgetter(1)
_KIND_CHANNEL_DEPTH = itemgetter(0, 2, 1)


def _row_order(row: Row) -> tuple[object, ...]:
    """The pointer walk's ORDER BY 1, 2 DESC, 4, 5, 6 for seeds and writes (text compared
    bytewise in both databases, as Python compares str): seeds first, writes oldest
    first, per checkpoint by (task_path, task_id, idx). Seeds have no task columns; their
    order is free."""
    if row[0] != 1:
        return (row[0], -row[1], "", "", 0)
    return (1, -row[1], row[3], row[4], row[5])


def order_runs_rows(rows: Sequence[Row]) -> list[Row]:
    """The rows of `delta_runs_stmt`, which come unordered (`delta_runs_sql`), in the
    order `decode_delta_history` reads them.

    Only the order of one channel's writes matters (seeds are read by channel). One
    stable sort by depth, oldest first, orders them unless two rows of one kind and
    channel share a depth (several writes of a channel pending on one checkpoint, or a
    seed beside a write): then the full order, as the statement's ORDER BY had it."""
    rows = rows if type(rows) is list else list(rows)
    if not rows or rows[0][0] == RUNS_FALLBACK:
        return rows
    rows.sort(key=_DEPTH, reverse=True)  # stable: equal depths keep their order
    count = len(rows)
    if len(set(map(_DEPTH, rows))) != count and len(set(map(_KIND_CHANNEL_DEPTH, rows))) != count:
        rows.sort(key=_row_order)
    return rows


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
    cache: ValueCache | None = None,
    bases: Bases | None = None,
) -> dict[str, DeltaChannelHistory]:
    """Rows (kind, depth, channel, task_path, task_id, idx, type, blob, ref, ikind, itext),
    seeds first, then writes oldest first, to one history per channel. `ref` is a seed's
    version and the checkpoint a write is pending on: each value is read at the location
    it was stored at, not the target's. A seed kept inline in its record comes as (ikind,
    itext), see `inline.from_sql`. A kind 2 row is an ancestor whose record is unreadable.
    `bases`: those of the seeds that are tail rows (`tail_seeds`, `tails.py`): a delta
    snapshot continuing an earlier one, or a channel that was a plain list before it
    became a delta channel. No `SEED_BASE` row is left among `rows`."""
    out: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
    located = is_located(serde)
    fast = batch_loader(serde)  # as in `decode_tuples`
    read = partial(load_at, serde)
    takes_inline = serde_inlines(serde)
    pending: list[Row] = []  # the write rows, decoded together below
    for row in rows:
        kind = row[0]
        if kind == 1:
            pending.append(row)
            continue
        if kind == SEED_BASE:  # read by `tail_seeds` already
            continue
        _, _depth, channel, _path, _task_id, _idx, type_, blob, ref = row[:9]
        if kind == WALK_BOUND_REACHED:  # never decode a walk cut short (see the statement)
            raise history_loop(thread_id, checkpoint_ns, str(ref))
        if kind == WALK_RECORD:
            fields = json_object(
                row[10], "checkpoint record", {"thread_id": thread_id, "checkpoint_id": ref}
            )
            verify_record(serde, thread_id, checkpoint_ns, str(ref), fields, row[9])
            continue
        if kind == WALK_UNREADABLE:
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
        if blob is None:  # a seed kept inline in its record
            where = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
            value = from_sql(row[9], row[10], {**where, "channel": channel})
            if not takes_inline:
                load = inline_loader(serde, thread_id, checkpoint_ns, where)
                value = load(channel, value, {channel: ref})
            entry["seed"] = value
            continue
        data = (type_, blob if type(blob) is bytes else bytes(blob))
        if bases is not None and type_.startswith(TAIL_PREFIX):
            where = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
            at = (thread_id, checkpoint_ns, channel, str(ref))
            entry["seed"] = load_tail(
                at,
                data,
                bases.get(at),
                partial(load_stored, fast, cache, read, located, thread_id, checkpoint_ns, channel),
                {**where, "channel": channel, "version": str(ref)},
            )
            continue
        entry["seed"] = load_stored(  # as `decode_tuples` reads values
            fast, cache, read, located, thread_id, checkpoint_ns, channel, data, str(ref), True
        )
    # The writes, oldest first: per row (kind, depth, channel, task_path, task_id, idx,
    # type, blob, ref). Their values in one call where the serializer can
    # (`plain_batch_loader`), else each alone; a loop per column, not per row, for the
    # thousand writes of a deep history.
    writes = [row for row in pending if row[2] in out]
    if not writes:
        return out
    keys = d.decode_write_keys([row[4] for row in writes], [row[5] for row in writes])
    plain = plain_batch_loader(serde)
    values = None
    if plain is not None and all(row[6] == TAG_MSGPACK for row in writes):
        values = plain([b if type(b := row[7]) is bytes else bytes(b) for row in writes])
    if values is None:
        values = [
            write_value(
                fast,
                read,
                located,
                (row[6], row[7] if type(row[7]) is bytes else bytes(row[7])),
                thread_id,
                checkpoint_ns,
                row[8],
                task_id,
                idx,
                row[2],
            )
            for row, (task_id, idx) in zip(writes, keys)
        ]
    if len(out) == 1:  # one channel: its writes in one pass
        [(channel, entry)] = out.items()
        entry["writes"] = [(task_id, channel, value) for (task_id, _), value in zip(keys, values)]
        return out
    for row, (task_id, _), value in zip(writes, keys, values):
        out[row[2]]["writes"].append((task_id, row[2], value))
    return out


def tail_seeds(
    rows: Sequence[Row], thread_id: str, checkpoint_ns: str
) -> tuple[list[Row], dict[BaseKey, tuple[str, Typed]], list[BaseKey]]:
    """Delta history rows without their `SEED_BASE` rows; the bases those brought, by the
    tail seed they continue; and the tail seeds whose base no row brought (the statement
    found none, or does not look), to read by `tails.bases_plan`. One pass over the rows."""
    bases: dict[BaseKey, tuple[str, Typed]] = {}
    tails: list[BaseKey] = []
    for row in rows:
        kind = row[0]
        if kind == 1:
            continue
        if kind == SEED_BASE:
            blob = row[7]
            key = (thread_id, checkpoint_ns, str(row[2]), str(row[8]))
            bases[key] = (str(row[10]), (str(row[6]), blob if type(blob) is bytes else bytes(blob)))
        elif kind == 0 and row[7] is not None and str(row[6]).startswith(TAIL_PREFIX):
            tails.append((thread_id, checkpoint_ns, str(row[2]), str(row[8])))
    kept = [row for row in rows if row[0] != SEED_BASE] if bases else rows
    return (
        kept if type(kept) is list else list(kept),
        bases,
        [key for key in tails if key not in bases],
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
        rows, bases, missing = tail_seeds(rows, thread_id, ns)
        if missing:
            bases.update((yield from bases_plan(d, missing)))
        out.update(
            decode_delta_history(
                rows, chunk, serde, d, thread_id=thread_id, checkpoint_ns=ns, bases=bases
            )
        )
    return out


def delta_walk_plan(
    d: Dialect, config: RunnableConfig, chunk: Sequence[str], records: bool = False
) -> Plan[list[Row]]:
    """The rows of `delta_history_stmt` for one chunk of channels (by runs where they hold,
    see `delta_runs_stmt`); a walk that reached its bound is walked again with the exact
    one, unless `confirm_walk_loop` finds a loop."""
    if not records:
        rows = yield delta_runs_stmt(d, config, chunk)
        if not rows or rows[0][0] != RUNS_FALLBACK:
            return order_runs_rows(rows)
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
