"""The delta-history statement (DESIGN.md 3.3), composed of named parts.

One recursive statement serves up to 62 channels: `walk` follows parent pointers from the
target, carrying a bitmask of the channels still looking for a stored value; `seeds`
reads the value where a channel's bit leaves the mask; `writes` reads the pending writes
of every checkpoint the walk entered while a channel's bit was set. The rows of every part
have one shape, `ROW_COLUMNS`, read by `delta.decode_delta_history`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.inline import inline_probe

MAX_CHANNELS_PER_QUERY = 62
"""Delta history tracks unseeded channels as bits of one signed 64-bit integer."""

WALK_BOUND_REACHED = -1
"""Row kind for a walk that reached its bound (see `delta_history_sql`)."""
WALK_UNREADABLE = 2
"""Row kind for a passed ancestor whose record cannot be read (guarded dialects)."""
WALK_RECORD = 3
"""Row kind carrying a passed checkpoint's record, to verify its seal."""
SEED_BASE = 4
"""Row kind for the base of a seed stored as a tail row (`tails.py`: a delta snapshot
continuing an earlier one), brought by the same statement: type, blob, ref = the seed's
version, itext = the base's version."""

ROW_COLUMNS = "kind, depth, channel, task_path, task_id, idx, type, blob, ref, ikind, itext"
"""Every part's row: kind 0 a seed (ref = its version, task_path = the checkpoint holding
it; an inline seed has no blob but (ikind, itext)), 1 a write (ref = the checkpoint it is
pending on), `SEED_BASE` the base of a tail seed, and the check rows."""


def history_params(
    thread_id: str, ns: str, checkpoint_id: str | None, channels: Sequence[str]
) -> dict[str, Any]:
    """The parameters every delta statement shares: the address and, per channel i,
    `ch{i}` (its name) and `ik{i}` (its inline probe)."""
    params: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "full": (1 << len(channels)) - 1,
    }
    if checkpoint_id is not None:
        params["checkpoint_id"] = checkpoint_id
    for i, ch in enumerate(channels):
        params[f"ch{i}"] = ch
        params[f"ik{i}"] = inline_probe(ch)
    return params


def bit(d: Dialect, i: int) -> str:
    return d.bigint(str(1 << i))


def in_namespace(d: Dialect, alias: str) -> str:
    """`alias` is a row of the addressed thread and namespace."""
    p = d.p
    return f"{alias}.thread_id = {p('thread_id')} AND {alias}.checkpoint_ns = {p('checkpoint_ns')}"


def checkpoint_at(d: Dialect, checkpoint_id: str, columns: str = "pc.checkpoint") -> str:
    """A primary-key lookup of the checkpoint `checkpoint_id` (an SQL expression) as `pc`."""
    condition = f"{in_namespace(d, 'pc')} AND pc.checkpoint_id = {checkpoint_id}"
    return d.lookup(d.checkpoints, "pc", columns, condition)


def target_sql(d: Dialect, latest: bool, bound_sql: str) -> str:
    """The target checkpoint (the latest when `latest`) with the walk's bound."""
    sql = (
        f"SELECT checkpoint_id, parent_checkpoint_id, {bound_sql} AS bound FROM {d.checkpoints} "
        f"WHERE thread_id = {d.p('thread_id')} AND checkpoint_ns = {d.p('checkpoint_ns')} "
    )
    if latest:
        return sql + "ORDER BY checkpoint_id DESC LIMIT 1"
    return sql + f"AND checkpoint_id = {d.p('checkpoint_id')}"


def walk_bound(d: Dialect) -> str:
    """The most checkpoints a walk without a loop can pass: `bound` when given, else the
    thread's summary count, else (no summary row: written before summaries existed) the
    namespace's row count. Per thread, not namespace: an upper bound either way."""
    p = d.p
    return (
        f"coalesce({d.typed(p('bound'), 'bigint')}, (SELECT s.checkpoint_count FROM "
        f"{d.threads} s WHERE s.thread_id = {p('thread_id')}), (SELECT count(*) FROM "
        f"{d.checkpoints} c WHERE {in_namespace(d, 'c')}))"
    )


def stored_at(d: Dialect, record: str, i: int) -> str:
    """Whether the checkpoint `record` holds a stored value of channel i: a value row at
    its version, or a small scalar kept inline (see `inline.py`)."""
    p = d.p
    ch = p(f"ch{i}")
    inline = d.inline_has(record, ch, p(f"ik{i}"))
    exact = (
        f"EXISTS (SELECT 1 FROM {d.blobs} sb WHERE {in_namespace(d, 'sb')} "
        f"AND sb.channel = {ch} AND sb.version = {d.version_of(record, ch)})"
    )
    # A channel that never snapshots has no value row at all: then no ancestor's record
    # is parsed (the test does not depend on the ancestor, so it runs once). Otherwise
    # the parse and one primary-key probe per ancestor: measured cheaper than any
    # string prefilter over the channel's stored versions (README, "Delta history").
    # Where the value rows are keyed version first, a small table lists the channels.
    listed = d.stored_channels or d.blobs
    any_stored = (
        f"EXISTS (SELECT 1 FROM {listed} sv WHERE {in_namespace(d, 'sv')} AND sv.channel = {ch})"
    )
    # An unparsed record still fails the statement when damaged, as the parse would
    # have, so that the guarded retry names it.
    probe = d.damaged_record_probe(record)
    stored = f"({any_stored} AND {exact})"
    if probe is not None:
        stored = f"({probe} OR {stored})"
    return f"({stored} OR {inline})"


def chans_sql(d: Dialect, n: int) -> str:
    """One row (bit, name) per channel."""
    return " UNION ALL ".join(
        f"SELECT {bit(d, i)} AS bit, {d.p(f'ch{i}')} AS name" for i in range(n)
    )


def walk_sql(d: Dialect, n: int) -> str:
    """The recursive walk: (checkpoint_id, parent_id, depth, mask_in, mask_out) per
    checkpoint passed, the target first with mask_in 0 (its own writes never count). It
    goes on while some channel has no seed and the bound is not reached."""
    seeded_bits = " + ".join(
        f"(CASE WHEN (w.mask_out & {bit(d, i)}) <> 0 AND {stored_at(d, 'pc.checkpoint', i)} "
        f"THEN {bit(d, i)} ELSE 0 END)"
        for i in range(n)
    )
    step = checkpoint_at(
        d, "w.parent_id", "pc.checkpoint_id, pc.parent_checkpoint_id, pc.checkpoint"
    )
    return (
        "walk(checkpoint_id, parent_id, depth, mask_in, mask_out) AS ("
        f"SELECT checkpoint_id, parent_checkpoint_id, 0, {d.bigint('0')}, "
        f"{d.bigint(d.p('full'))} FROM target "
        "UNION ALL "
        "SELECT pc.checkpoint_id, pc.parent_checkpoint_id, w.depth + 1, w.mask_out, "
        f"w.mask_out - ({seeded_bits}) FROM walk w {step} "
        "WHERE w.mask_out <> 0 AND w.depth < (SELECT bound FROM target))"
    )


def seeded_here(d: Dialect, i: int) -> str:
    """The walk row where channel i found its seed: its bit entered, and did not leave."""
    return f"(w.mask_in & {bit(d, i)}) <> 0 AND (w.mask_out & {bit(d, i)}) = 0"


def seed_value(d: Dialect, i: int, columns: str) -> str:
    """Channel i's value row at the version the record of checkpoint `pc` names, as `bl`
    (a primary-key lookup)."""
    ch = d.p(f"ch{i}")
    return d.lookup(
        d.blobs,
        "bl",
        columns,
        f"{in_namespace(d, 'bl')} AND bl.channel = {ch} "
        f"AND bl.version = {d.version_of('pc.checkpoint', ch)}",
    )


def blob_seed_sql(d: Dialect, i: int) -> str:
    """Channel i's seed from a value row at the seed checkpoint's version."""
    ch = d.p(f"ch{i}")
    value = seed_value(d, i, "bl.type, bl.blob, bl.version")
    return (
        f"SELECT 0 AS kind, w.depth AS depth, {d.text(ch)} AS channel, "
        f"w.checkpoint_id AS task_path, {d.null('text')} AS task_id, "
        f"{d.null('int')} AS idx, bl.type AS type, bl.blob AS blob, bl.version AS ref, "
        f"{d.null('text')} AS ikind, {d.null('text')} AS itext "
        f"FROM walk w {checkpoint_at(d, 'w.checkpoint_id')} {value} WHERE {seeded_here(d, i)}"
    )


def seed_base_row(d: Dialect, i: int, depth: str, source: str) -> str:
    """A `SEED_BASE` row of channel i: `source` (FROM and joins) makes the checkpoint
    holding its seed `pc`; the seed's value row `bl` and, if that is a tail, the whole row
    it continues `bb` are looked up by primary key."""
    ch = d.p(f"ch{i}")
    value = seed_value(d, i, "bl.version, bl.base_version")
    base = d.lookup(
        d.blobs,
        "bb",
        "bb.type, bb.blob, bb.version",
        f"{in_namespace(d, 'bb')} AND bb.channel = {ch} AND bb.version = bl.base_version "
        "AND bb.base_version IS NULL",
    )
    return (
        f"SELECT {SEED_BASE}, {depth}, {d.text(ch)}, NULL, NULL, NULL, bb.type, bb.blob, "
        f"bl.version, NULL, bb.version {source} {value} {base}"
    )


def seed_base_sql(d: Dialect, i: int) -> str:
    """The base of channel i's seed where that seed is a tail row."""
    source = f"FROM walk w {checkpoint_at(d, 'w.checkpoint_id')}"
    return f"{seed_base_row(d, i, 'w.depth', source)} WHERE {seeded_here(d, i)}"


def inline_seed_sql(d: Dialect, i: int) -> str:
    """Channel i's seed kept inline in the seed checkpoint's record."""
    ch = d.p(f"ch{i}")
    kind, text = d.inline_value("pc.checkpoint", ch)
    return (
        f"SELECT 0, w.depth, {d.text(ch)}, w.checkpoint_id, NULL, NULL, NULL, NULL, "
        f"{d.version_of('pc.checkpoint', ch)}, {kind}, {text} "
        f"FROM walk w {checkpoint_at(d, 'w.checkpoint_id')} WHERE {seeded_here(d, i)} "
        f"AND {d.inline_has('pc.checkpoint', ch, d.p(f'ik{i}'))}"
    )


def seeds_sql(d: Dialect, n: int) -> str:
    """Every channel's seed: a value row or an inline value (at most one of the two), and
    the base of a seed stored as a tail."""
    parts = [blob_seed_sql(d, i) for i in range(n)] + [inline_seed_sql(d, i) for i in range(n)]
    parts += [seed_base_sql(d, i) for i in range(n)]
    return " UNION ALL ".join(parts)


def writes_sql(d: Dialect) -> str:
    """The pending writes of each checkpoint the walk entered, for the channels whose bit
    was set on entering it."""
    pending = d.lookup(
        d.writes,
        "wr",
        "wr.task_path, wr.task_id, wr.task_name, wr.channel, wr.type, wr.idx, wr.blob",
        f"{in_namespace(d, 'wr')} AND wr.checkpoint_id = w.checkpoint_id",
    )
    return (
        "SELECT 1, w.depth, wr.channel, wr.task_path, "
        f"{d.task_id_text('wr.task_id')}, wr.idx, wr.type, wr.blob, w.checkpoint_id, "
        f"NULL, NULL FROM walk w {pending} "
        "JOIN chans ON chans.name = wr.channel AND (w.mask_in & chans.bit) <> 0"
    )


def bound_reached_sql(d: Dialect) -> str:
    """One row where the walk reached its bound (a loop, or a stale summary)."""
    return (
        f"SELECT {WALK_BOUND_REACHED}, w.depth, {d.null('text')}, {d.null('text')}, "
        f"{d.null('text')}, {d.null('int')}, {d.null('text')}, {d.null('bytes')}, "
        f"w.checkpoint_id, {d.null('text')}, {d.null('text')} FROM walk w "
        "WHERE w.depth >= (SELECT bound FROM target)"
    )


def unreadable_sql(d: Dialect) -> str | None:
    """Rows for passed ancestors whose record cannot be read: the walk could not see
    their values (guarded dialects only)."""
    unreadable = d.record_unreadable("pc.checkpoint")
    if unreadable is None:
        return None
    return (
        f"SELECT {WALK_UNREADABLE}, w.depth, NULL, NULL, NULL, NULL, NULL, NULL, "
        f"w.checkpoint_id, NULL, NULL FROM walk w {checkpoint_at(d, 'w.checkpoint_id')} "
        f"WHERE w.depth > 0 AND {unreadable}"
    )


def records_sql(d: Dialect) -> str:
    """One row per passed checkpoint with its record and parent, to verify its seal."""
    return (
        f"SELECT {WALK_RECORD}, w.depth, NULL, NULL, NULL, NULL, NULL, NULL, "
        f"w.checkpoint_id, w.parent_id, {d.text('pc.checkpoint')} "
        f"FROM walk w {checkpoint_at(d, 'w.checkpoint_id')}"
    )


def delta_history_sql(d: Dialect, n: int, latest: bool, records: bool) -> str:
    """The whole statement for `n` channels: the check rows first, then seeds, then
    writes oldest first (per checkpoint in (task_path, task_id, idx) order)."""
    parts = [bound_reached_sql(d), seeds_sql(d, n), writes_sql(d)]
    unreadable = unreadable_sql(d)
    if unreadable is not None:
        parts.append(unreadable)
    if records:
        parts.append(records_sql(d))
    return (
        f"WITH RECURSIVE chans AS ({chans_sql(d, n)}), "
        f"target AS ({target_sql(d, latest, walk_bound(d))}), {walk_sql(d, n)} "
        + " UNION ALL ".join(parts)
        + " ORDER BY 1, 2 DESC, 4, 5, 6"
    )
