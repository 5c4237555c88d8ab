"""Delta history as range scans over runs (revision 0008), composed of named parts.

Every checkpoint has a `seq` (insertion order in its namespace) and a `run_start`: a
checkpoint whose parent is the previous `seq` continues its parent's run, any other starts
one. The ancestors of a checkpoint within its run are then exactly the `seq` range
[run_start, seq], so the walk of `delta_sql` (one primary-key chase per ancestor) becomes
one step per run: `runs` follows the parent pointer of each run's first checkpoint only.
In each run, a channel's seed is the newest checkpoint of the range holding a stored value
(one descending index scan that stops there), and its writes are one range of the writes
index (thread, namespace, channel, seq), plus the channel's writes that have no number
(`unnumbered_writes_sql`), placed by their checkpoint's number.

Nothing here trusts the numbers blindly. `checks` compares every range it used with the
parent pointers (each checkpoint's parent is the one numbered just before it, the range
has no hole) and asks for the pointer walk of `delta_sql` instead (a `RUNS_FALLBACK` row)
wherever they disagree, a checkpoint has no number (written around the saver), a run's
range is reversed, or the runs pass as many ancestors as the thread holds checkpoints (a
loop, which the pointer walk then reports, as it would have).
"""

from __future__ import annotations

from checkpointer.savers.sql.delta_sql import (
    bit,
    in_namespace,
    seed_base_row,
    seed_value,
    stored_at,
    target_sql,
    walk_bound,
)
from checkpointer.savers.sql.dialect import Dialect

RUNS_FALLBACK = -2
"""Row kind: the ranges cannot be trusted here; walk parent pointers (`delta_sql`)."""

DEPTH_PER_RUN = 1 << 32
"""A write's depth is run * DEPTH_PER_RUN + its distance from the run's newest checkpoint:
larger is older, as the pointer walk's depth."""


def seed_seq(d: Dialect, i: int, lo: str, hi: str) -> str:
    """The newest seq in [lo, hi] holding a stored value of channel i (NULL: none)."""
    return (
        f"(SELECT c.seq FROM {d.checkpoints} c WHERE {in_namespace(d, 'c')} "
        f"AND c.seq BETWEEN {lo} AND {hi} AND {stored_at(d, 'c.checkpoint', i)} "
        "ORDER BY c.seq DESC LIMIT 1)"
    )


def still_looking(d: Dialect, n: int) -> str:
    """The channels of run `r` that found no seed there: the next run looks for them."""
    found = " + ".join(
        f"(CASE WHEN r.s{i} IS NOT NULL THEN {bit(d, i)} ELSE 0 END)" for i in range(n)
    )
    return f"(r.mask - ({found}))"


def runs_sql(d: Dialect, n: int) -> str:
    """runs(k, hi, lo, passed, mask, s0..): the k-th run back from the target's parent,
    its seq range, the checkpoints passed so far, the channels looking for a seed on
    entering it, and where in it each found one."""
    seeds = ", ".join(f"s{i}" for i in range(n))
    first = ", ".join(seed_seq(d, i, "p.run_start", "p.seq") for i in range(n))
    mask = still_looking(d, n)
    then = ", ".join(
        f"CASE WHEN ({mask} & {bit(d, i)}) <> 0 THEN {seed_seq(d, i, 'p.run_start', 'p.seq')} END"
        for i in range(n)
    )
    parent = d.lookup(
        d.checkpoints,
        "p",
        "p.seq, p.run_start",
        f"{in_namespace(d, 'p')} AND p.checkpoint_id = t.parent_checkpoint_id",
    )
    start = d.lookup(
        d.checkpoints, "b", "b.parent_checkpoint_id", f"{in_namespace(d, 'b')} AND b.seq = r.lo"
    )
    up = d.lookup(
        d.checkpoints,
        "p",
        "p.seq, p.run_start",
        f"{in_namespace(d, 'p')} AND p.checkpoint_id = b.parent_checkpoint_id",
    )
    return (
        f"runs(k, hi, lo, passed, mask, {seeds}) AS ("
        f"SELECT 0, p.seq, p.run_start, p.seq - p.run_start + 1, {d.bigint(d.p('full'))}, "
        f"{first} FROM target t {parent} "
        "UNION ALL "
        f"SELECT r.k + 1, p.seq, p.run_start, r.passed + p.seq - p.run_start + 1, {mask}, "
        f"{then} FROM runs r {start} {up} "
        # Only from a sane run (a reversed range, written around the saver, would count
        # backwards and never reach the bound): `checks_sql` then asks for the walk.
        f"WHERE {mask} <> 0 AND r.lo <= r.hi AND r.passed < (SELECT bound FROM target))"
    )


def spans_sql(d: Dialect, n: int) -> str:
    """spans(k, lo, hi): each part of a run some channel read (from its seed, or the whole
    run), once each."""
    return " UNION ".join(
        f"SELECT r.k AS k, coalesce(r.s{i}, r.lo) AS lo, r.hi AS hi FROM runs r "
        f"WHERE (r.mask & {bit(d, i)}) <> 0"
        for i in range(n)
    )


def broken_span(d: Dialect) -> str:
    """Whether span `g` is not a stretch of the parent chain: a hole, a repeated seq, or a
    checkpoint whose parent is not the one numbered just before it. Two exact forms, each
    the cheaper on its database (a span of 1,000 checkpoints: on SQLite the probes 0.6 ms,
    the window 1.3 ms; on PostgreSQL the window 0.5 ms, the probes 1.3 ms)."""
    if d.name == "postgresql":
        return neighbours_disagree(d)
    return parents_missing(d)


def neighbours_disagree(d: Dialect) -> str:
    """`broken_span` by a window pairing each checkpoint of the span with the previous."""
    return (
        "EXISTS (SELECT 1 FROM (SELECT c.seq AS seq, c.parent_checkpoint_id AS parent, "
        "lag(c.seq) OVER (ORDER BY c.seq) AS pseq, "
        "lag(c.checkpoint_id) OVER (ORDER BY c.seq) AS prev "
        f"FROM {d.checkpoints} c WHERE {in_namespace(d, 'c')} "
        "AND c.seq BETWEEN g.lo AND g.hi) x "
        "WHERE (x.pseq IS NULL AND x.seq <> g.lo) OR (x.pseq IS NOT NULL "
        "AND (x.pseq <> x.seq - 1 OR x.parent IS NULL OR x.parent <> x.prev)))"
    )


def parents_missing(d: Dialect) -> str:
    """`broken_span` by a count and one probe per checkpoint, no pairing of neighbours.

    Exact: `hi` is held by the run's checkpoint, and every checkpoint above `lo` having
    its parent (probed by number and id, in the namespace) at seq - 1 puts at least one
    checkpoint at every number down to `lo`; `count = hi - lo + 1` then leaves exactly one
    at each, so the pointers from `hi` pass hi, hi - 1, .., lo and nothing else is in the
    range. The probe is a correlated subquery, not a join, so that no planner makes it a
    scan per checkpoint (PostgreSQL did, without statistics: quadratic in the span)."""
    orphan = (
        f"CASE WHEN c.seq > g.lo AND NOT EXISTS (SELECT 1 FROM {d.checkpoints} q "
        f"WHERE {in_namespace(d, 'q')} AND q.seq = c.seq - 1 "
        "AND q.checkpoint_id = c.parent_checkpoint_id) THEN 1 ELSE 0 END"
    )
    return (
        f"NOT coalesce((SELECT count(*) = g.hi - g.lo + 1 AND sum({orphan}) = 0 "
        f"FROM {d.checkpoints} c WHERE {in_namespace(d, 'c')} "
        "AND c.seq BETWEEN g.lo AND g.hi), FALSE)"
    )


def fallback_row(d: Dialect, condition: str, source: str = "") -> str:
    return (
        f"SELECT {RUNS_FALLBACK} AS kind, 0 AS depth, {d.null('text')} AS channel, "
        f"{d.null('text')} AS task_path, {d.null('text')} AS task_id, {d.null('int')} AS idx, "
        f"{d.null('text')} AS type, {d.null('bytes')} AS blob, {d.null('text')} AS ref, "
        f"{d.null('text')} AS ikind, {d.null('text')} AS itext {source}WHERE {condition}"
    )


def checks_sql(d: Dialect, n: int) -> str:
    """`RUNS_FALLBACK` rows wherever the ranges cannot stand in for the pointer walk."""
    return " UNION ALL ".join(
        [
            fallback_row(
                d,
                "r.hi IS NULL OR r.lo IS NULL OR r.lo > r.hi "
                # The target and its ancestors are distinct checkpoints of the thread: as
                # many ancestors as it holds is a loop (or a stale count), as in the walk.
                "OR r.passed >= (SELECT bound FROM target)",
                "FROM runs r ",
            ),
            fallback_row(d, broken_span(d), "FROM spans g "),
        ]
    )


def seed_checkpoint(d: Dialect, i: int) -> str:
    """The checkpoint where channel i found its seed, as `pc`."""
    return d.lookup(
        d.checkpoints,
        "pc",
        "pc.checkpoint, pc.checkpoint_id",
        f"{in_namespace(d, 'pc')} AND pc.seq = r.s{i}",
    )


def blob_seed_sql(d: Dialect, i: int) -> str:
    """Channel i's seed from a value row at the seed checkpoint's version."""
    ch = d.p(f"ch{i}")
    value = seed_value(d, i, "bl.type, bl.blob, bl.version")
    return (
        f"SELECT 0, r.k, {d.text(ch)}, pc.checkpoint_id, NULL, NULL, bl.type, bl.blob, "
        "bl.version, "
        f"NULL, NULL FROM runs r {seed_checkpoint(d, i)} {value} WHERE r.s{i} IS NOT NULL"
    )


def seed_base_sql(d: Dialect, i: int) -> str:
    """The base of channel i's seed where that seed is a tail row (`SEED_BASE`)."""
    row = seed_base_row(d, i, "r.k", f"FROM runs r {seed_checkpoint(d, i)}")
    return f"{row} WHERE r.s{i} IS NOT NULL"


def inline_seed_sql(d: Dialect, i: int) -> str:
    """Channel i's seed kept inline in the seed checkpoint's record."""
    ch = d.p(f"ch{i}")
    kind, text = d.inline_value("pc.checkpoint", ch)
    return (
        f"SELECT 0, r.k, {d.text(ch)}, pc.checkpoint_id, NULL, NULL, NULL, NULL, "
        f"{d.version_of('pc.checkpoint', ch)}, {kind}, {text} "
        f"FROM runs r {seed_checkpoint(d, i)} WHERE r.s{i} IS NOT NULL "
        f"AND {d.inline_has('pc.checkpoint', ch, d.p(f'ik{i}'))}"
    )


_WRITE_COLUMNS = ("task_path", "task_id", "task_name", "channel", "type", "idx", "blob")
"""The columns of a write row that `write_rows_sql` selects (with its checkpoint_id)."""


def write_rows_sql(d: Dialect, i: int, w: str, seq: str, joins: str, where: str = "") -> str:
    """Rows of channel i's writes (alias `w`, numbered by `seq`) in the runs it read."""
    return (
        f"SELECT 1, r.k * {d.bigint(str(DEPTH_PER_RUN))} + (r.hi - {seq}), {w}.channel, "
        f"{w}.task_path, {d.task_id_text(f'{w}.task_id')}, {w}.idx, {w}.type, {w}.blob, "
        f"{w}.checkpoint_id, NULL, NULL FROM runs r {joins} "
        f"WHERE (r.mask & {bit(d, i)}) <> 0{where}"
    )


def writes_sql(d: Dialect, i: int) -> str:
    """Channel i's writes in each run it read: one range of the writes index per run."""
    pending = d.lookup(
        d.writes,
        "wr",
        ", ".join(f"wr.{c}" for c in (*_WRITE_COLUMNS, "checkpoint_id", "seq")),
        f"{in_namespace(d, 'wr')} AND wr.channel = {d.p(f'ch{i}')} "
        f"AND wr.seq BETWEEN coalesce(r.s{i}, r.lo) AND r.hi",
    )
    return write_rows_sql(d, i, "wr", "wr.seq", pending)


def unnumbered_writes_sql(d: Dialect, i: int) -> str:
    """Channel i's writes stored without a seq, pending on a checkpoint of a run it read,
    placed by their checkpoint's seq. On PostgreSQL a write committed while its
    checkpoint's put is in flight sees no seq to take, and the put does not see the write
    to number it (LangGraph sends a step's first writes and its checkpoint concurrently);
    rows written around the saver may have none either. The partial index of unnumbered
    writes keeps this a probe that finds nothing in the common case."""
    unnumbered = d.lookup(
        d.writes,
        "u",
        ", ".join(f"u.{c}" for c in (*_WRITE_COLUMNS, "checkpoint_id")),
        f"{in_namespace(d, 'u')} AND u.channel = {d.p(f'ch{i}')} AND u.seq IS NULL",
    )
    pending_on = d.lookup(
        d.checkpoints,
        "uc",
        "uc.seq",
        f"{in_namespace(d, 'uc')} AND uc.checkpoint_id = u.checkpoint_id",
    )
    return write_rows_sql(
        d,
        i,
        "u",
        "uc.seq",
        f"{unnumbered} {pending_on}",
        f" AND uc.seq BETWEEN coalesce(r.s{i}, r.lo) AND r.hi",
    )


def delta_runs_sql(d: Dialect, n: int, latest: bool) -> str:
    """The whole statement for `n` channels, rows as `delta_sql.ROW_COLUMNS`: only
    `RUNS_FALLBACK` rows where a check fails (the other parts then read nothing), else
    seeds and writes, unordered.

    Python orders them (`delta.order_runs_rows`): ordering by an expression (the depth)
    copies every row, value included, through the database's sorter, on SQLite a fifth
    of the statement at 1,000 writes, on PostgreSQL 0.5 of its 2.6 ms, against a few
    percent of the call in Python, where the rows' arrival in index order makes the sort
    nearly linear. The text columns it compares (task path, task id) are bytewise on both
    databases, as Python compares strings: SQLite's binary collation, PostgreSQL's "C"
    (`schema.key_text`, `task_id_text`)."""
    if d.json_guarded:  # reading around damaged records: the pointer walk names them
        return fallback_row(d, "1 = 1")
    data = [blob_seed_sql(d, i) for i in range(n)]
    data += [inline_seed_sql(d, i) for i in range(n)]
    data += [seed_base_sql(d, i) for i in range(n)]
    data += [writes_sql(d, i) for i in range(n)]
    data += [unnumbered_writes_sql(d, i) for i in range(n)]
    passed = " AND NOT EXISTS (SELECT 1 FROM checks)"
    return (
        f"WITH RECURSIVE target AS ({target_sql(d, latest, walk_bound(d))}), "
        f"{runs_sql(d, n)}, spans AS ({spans_sql(d, n)}), checks AS ({checks_sql(d, n)}) "
        "SELECT * FROM checks UNION ALL " + " UNION ALL ".join(part + passed for part in data)
    )
