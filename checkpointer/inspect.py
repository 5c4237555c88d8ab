"""Time travel over a checkpoint database: what the `checkpointer` tools read.

`open_reader(url)` opens a database read-only: ours (`checkpointer.inspect_db.Database`) or
one written by LangGraph's own savers (`checkpointer.inspect_langgraph.LangGraphReader`),
both `checkpointer.reader.Reader`s. The functions below turn their raw rows into views of a
thread: its history (`history`, `history_entries`), the full state at one checkpoint
(`state_view`) and what changed between two (`diff_view`), the same on either kind.

Values are loaded leniently: one value whose class is not allowed to load shows as an
`Unloadable` placeholder instead of failing the whole view. Delta channels are rebuilt only
when the caller supplies their channel specs (reducers); otherwise a view shows the nearest
stored snapshot and the writes since, labelled as such, never a guessed value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from checkpointer.channels import (
    MISSING,
    BaseChannel,
    BinaryOperatorAggregate,
    DeltaChannel,
    DeltaSnapshot,
)
from checkpointer.errors import CheckpointNotFoundError, SchemaVersionError
from checkpointer.inspect_db import Database as Database
from checkpointer.inspect_db import DatabaseUnavailableError as DatabaseUnavailableError
from checkpointer.inspect_db import UnknownThreadError as UnknownThreadError
from checkpointer.inspect_db import Unloadable as Unloadable
from checkpointer.inspect_db import is_snapshot_blob as is_snapshot_blob
from checkpointer.inspect_db import mask_url as mask_url
from checkpointer.inspect_db import one_line as one_line
from checkpointer.inspect_db import tool_serializer as tool_serializer
from checkpointer.inspect_db import with_langgraph_types as with_langgraph_types
from checkpointer.reader import Reader
from checkpointer.replay import channel_from_history
from checkpointer.savers.sql.inspect import (
    Ancestor,
    Footprint,
    RawHistoryRow,
    RawTuple,
    RawWrite,
    SkeletonNode,
    footprint_plan,
)
from checkpointer.savers.sql.migration import check_revision
from checkpointer.savers.sql.plan import Plan
from checkpointer.serde import MsgpackSerializer
from checkpointer.types import INTERRUPT, DeltaChannelHistory

T = TypeVar("T")
AnyChannel = BaseChannel[Any, Any, Any]
MAX_WALK = 10_000_000


@contextmanager
def open_reader(
    url: str,
    *,
    schema: str | None = None,
    serde: MsgpackSerializer | None = None,
) -> Iterator[Reader]:
    """A read-only `Reader` of the database at `url`: our schema, or the tables of
    LangGraph's own SQLite or PostgreSQL saver (told apart by what the database holds).
    Nothing it does can change the database. SchemaVersionError when it holds neither.
    """
    from checkpointer.inspect_langgraph import LangGraphReader, has_langgraph_tables

    with Database.open(url, schema=schema, serde=serde, readonly=True) as db:
        found = db.revision()
        if found is None and has_langgraph_tables(db):
            yield LangGraphReader.over(db)
            return
        if found is None:
            # Not ours and not LangGraph's: say so, rather than advise adding our tables
            # to someone else's database.
            raise SchemaVersionError(
                f"{db.where} has no checkpointer schema and no tables of LangGraph's SQLite "
                "or Postgres saver: nothing to read (a new database gets its schema from "
                "`checkpointer migrate --url URL` or saver.setup())"
            )
        check_revision(found, where=db.where)
        yield db


# --------------------------------------------------------------------------- helpers
def is_internal_channel(name: str) -> bool:
    """Channels the runtimes use for scheduling (triggers, barriers, input), not state."""
    return name.startswith(("__", "branch:", "join:"))


def _step(metadata: Mapping[str, Any]) -> int | None:
    step = metadata.get("step")
    return step if isinstance(step, int) else None


_PULL_PREFIX = "~__pregel_pull, "


def task_names(writes: Sequence[Any]) -> list[str]:
    """Node names recoverable from task paths: ours are the node name, LangGraph's pull
    tasks are `~__pregel_pull, NAME` (push tasks name no node)."""
    names: list[str] = []
    for write in writes:
        path = write.task_path
        name = path[len(_PULL_PREFIX) :] if path.startswith(_PULL_PREFIX) else None
        if name is None and path and not path.startswith("~") and "," not in path:
            name = path
        if name and name not in names:
            names.append(name)
    return names


def pending_interrupts(writes: Sequence[Any], load: Any) -> list[Any]:
    """Interrupts still waiting: `__interrupt__` writes of tasks that have not finished
    (no regular write of theirs is stored)."""
    finished = {w.task_id for w in writes if w.idx >= 0}
    out: list[Any] = []
    for w in writes:
        if w.channel != INTERRUPT or w.task_id in finished:
            continue
        raw = w.raw
        if raw is None:
            continue
        value = load(raw)
        out.extend(value if isinstance(value, list | tuple) else [value])
    return out


# --------------------------------------------------------------------------- history
@dataclass(slots=True)
class HistoryEntry:
    """One checkpoint in `checkpointer history`."""

    checkpoint_id: str
    parent_id: str | None
    step: int | None
    source: str | None
    ts: str | None
    nodes: list[str]
    nodes_from: Literal["metadata", "task_paths", "none"]
    updated_channels: list[str] | None
    changed_channels: list[str]
    written_channels: list[str]
    pending_writes: int
    interrupts: list[Any]
    children: list[str]
    run_id: str | None
    metadata: dict[str, Any]


def children_of(nodes: Mapping[str, SkeletonNode]) -> dict[str, list[str]]:
    """Child ids per checkpoint, oldest first."""
    children: dict[str, list[str]] = {cid: [] for cid in nodes}
    for cid in sorted(nodes):
        parent = nodes[cid].parent_id
        if parent is not None and parent in children:
            children[parent].append(cid)
    return children


def branch_of(nodes: Mapping[str, SkeletonNode], head: str) -> list[str]:
    """`head` and its ancestors, newest first (stops at a missing parent or a loop)."""
    out: list[str] = []
    seen: set[str] = set()
    cursor: str | None = head
    while cursor is not None and cursor in nodes and cursor not in seen:
        seen.add(cursor)
        out.append(cursor)
        cursor = nodes[cursor].parent_id
    return out


def history_entries(
    nodes: Mapping[str, SkeletonNode], ids: Sequence[str], load: Any
) -> list[HistoryEntry]:
    """The history view of checkpoints `ids` of one namespace skeleton."""
    children = children_of(nodes)
    out: list[HistoryEntry] = []
    for cid in ids:
        node = nodes[cid]
        parent = nodes.get(node.parent_id) if node.parent_id is not None else None
        versions: dict[str, Any] = node.record.get("channel_versions") or {}
        parent_versions: dict[str, Any] = (
            (parent.record.get("channel_versions") or {}) if parent else {}
        )
        meta_nodes = node.metadata.get("nodes")
        if isinstance(meta_nodes, list):
            names, origin = [str(n) for n in meta_nodes], "metadata"
        else:
            names = task_names(parent.writes) if parent else []
            origin = "task_paths" if names else "none"
        updated = node.record.get("updated_channels")
        run_id = node.metadata.get("run_id")
        out.append(
            HistoryEntry(
                checkpoint_id=cid,
                parent_id=node.parent_id,
                step=_step(node.metadata),
                source=node.metadata.get("source"),
                ts=node.record.get("ts"),
                nodes=names,
                nodes_from=origin,  # type: ignore[arg-type]
                updated_channels=None if updated is None else [str(c) for c in updated],
                changed_channels=sorted(
                    ch for ch, v in versions.items() if str(parent_versions.get(ch)) != str(v)
                ),
                written_channels=sorted(
                    {w.channel for w in (parent.writes if parent else []) if w.idx >= 0}
                ),
                pending_writes=len(node.writes),
                interrupts=pending_interrupts(node.writes, load),
                children=children[cid],
                run_id=None if run_id is None else str(run_id),
                metadata=node.metadata,
            )
        )
    return out


def history(
    reader: Reader,
    thread_id: str,
    ns: str = "",
    *,
    at: str | None = None,
    all_branches: bool = False,
    limit: int = 0,
) -> tuple[str, dict[str, SkeletonNode], list[HistoryEntry]]:
    """(head, skeleton, entries) of a thread: the branch ending at its head (or at `at`),
    newest first, the newest `limit` only; or with `all_branches` every checkpoint, oldest
    first."""
    head = reader.resolve(thread_id, ns, at)
    nodes = reader.skeleton(thread_id, ns)
    ids = sorted(nodes) if all_branches else branch_of(nodes, head)
    if limit and not all_branches:
        ids = ids[:limit]
    return head, nodes, history_entries(nodes, ids, reader.load)


# --------------------------------------------------------------------------- state
ChannelKind = Literal["value", "snapshot", "rebuilt", "delta", "empty"]


@dataclass(frozen=True, slots=True)
class WriteView:
    """A pending write, with the checkpoint it is pending on (the step after that
    checkpoint's step made it)."""

    checkpoint_id: str
    step: int | None
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Any


@dataclass(frozen=True, slots=True)
class SeedView:
    """The nearest stored value a delta channel replays from."""

    checkpoint_id: str
    step: int | None
    value: Any


@dataclass(slots=True)
class ChannelView:
    """One channel at one checkpoint.

    kind: `value` (stored at this version), `snapshot` (a stored DeltaSnapshot: the full
    value), `rebuilt` (a delta channel replayed with its reducer), `delta` (a delta
    channel NOT rebuilt: `seed` + `writes` since, no value), `empty` (a version but no value:
    a channel that was cleared, like a consumed trigger).
    """

    name: str
    version: str | None
    kind: ChannelKind
    value: Any = MISSING
    seed: SeedView | None = None
    writes: list[WriteView] = field(default_factory=list)
    note: str | None = None

    @property
    def has_value(self) -> bool:
        return self.value is not MISSING


@dataclass(slots=True)
class StateView:
    """`checkpointer show`: everything stored about one checkpoint, values rebuilt."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    ts: str | None
    step: int | None
    source: str | None
    metadata: dict[str, Any]
    channels: dict[str, ChannelView]
    pending_writes: list[WriteView]
    interrupts: list[Any]


def _spec_rebuilds(spec: AnyChannel | None) -> bool:
    return isinstance(spec, DeltaChannel | BinaryOperatorAggregate)


def channel_views(
    db: Reader,
    raw: RawTuple,
    specs: Mapping[str, AnyChannel] | None,
    only: set[str] | None = None,
) -> dict[str, ChannelView]:
    """Every versioned channel of `raw` (or those in `only`): stored values loaded, delta
    channels rebuilt when `specs` has their reducer, else shown as seed + writes."""
    versions: dict[str, Any] = raw.record.get("channel_versions") or {}
    views: dict[str, ChannelView] = {}
    to_walk: list[str] = []
    for name in sorted(versions):
        if only is not None and name not in only:
            continue
        version = str(versions[name])
        if name in raw.blobs:
            value = db.load(raw.blobs[name])
            if isinstance(value, DeltaSnapshot):
                views[name] = ChannelView(name, version, "snapshot", value.value)
            elif db.is_snapshot(raw.blobs[name]):
                views[name] = ChannelView(name, version, "snapshot", value)  # unloadable
            else:
                views[name] = ChannelView(name, version, "value", value)
            continue
        spec = specs.get(name) if specs is not None else None
        views[name] = ChannelView(name, version, "empty")
        if (specs is not None and _spec_rebuilds(spec)) or (
            specs is None and not is_internal_channel(name)
        ):
            to_walk.append(name)
    if specs is not None:
        # As the graph's own state view does: a channel with no version yet but a value
        # when empty (a delta channel's empty list) shows that value.
        for name, spec in specs.items():
            if name in versions or (only is not None and name not in only):
                continue
            if is_internal_channel(name):
                continue
            try:
                empty = spec.from_checkpoint(MISSING)
            except Exception:  # a channel that cannot start empty has nothing to show
                continue
            if empty.is_available():
                views[name] = ChannelView(name, None, "rebuilt", empty.get())
    if not to_walk:
        return views
    rows = db.delta_rows(raw.thread_id, raw.checkpoint_ns, raw.checkpoint_id, to_walk)
    depth = max((r.depth for r in rows), default=0)
    ancestors: dict[int, Ancestor] = {}
    if depth:
        walk = db.ancestors(raw.thread_id, raw.checkpoint_ns, raw.checkpoint_id, depth)
        ancestors = {a.depth: a for a in walk}
    by_channel: dict[str, list[RawHistoryRow]] = {name: [] for name in to_walk}
    for row in rows:
        by_channel.setdefault(row.channel, []).append(row)
    for name in to_walk:
        spec = specs.get(name) if specs is not None else None
        views[name] = _delta_view(db, views[name], by_channel[name], ancestors, spec)
    return views


def _delta_view(
    db: Reader,
    view: ChannelView,
    rows: list[RawHistoryRow],
    ancestors: Mapping[int, Ancestor],
    spec: AnyChannel | None,
) -> ChannelView:
    seed: SeedView | None = None
    seed_value: Any = MISSING
    seed_is_snapshot = False
    writes: list[WriteView] = []
    for row in rows:
        at = ancestors.get(row.depth)
        cid = at.checkpoint_id if at else f"<{row.depth} parents up>"
        step = at.step if at else None
        value = db.load(row.raw)
        if row.kind == 0:
            seed_value = value
            seed_is_snapshot = isinstance(value, DeltaSnapshot) or db.is_snapshot(row.raw)
            shown = value.value if isinstance(value, DeltaSnapshot) else value
            seed = SeedView(cid, step, shown)
        else:
            writes.append(
                WriteView(cid, step, row.task_id, row.task_path, row.idx, row.channel, value)
            )
    # A seed that cannot be read (encrypted without a key, say) may be a snapshot: say so
    # rather than call the channel empty.
    is_delta = (
        seed_is_snapshot or (seed is None and bool(writes)) or isinstance(seed_value, Unloadable)
    )
    if spec is None and not is_delta:
        # A stored plain value earlier and no snapshot: a cleared channel, not a delta one.
        return view
    if spec is not None:
        loaded = [seed_value, *(w.value for w in writes)]
        bad = next((v for v in loaded if isinstance(v, Unloadable)), None)
        if bad is None:
            history: DeltaChannelHistory = {
                "writes": [(w.task_id, w.channel, w.value) for w in writes]
            }
            if seed_value is not MISSING:
                history["seed"] = seed_value
            channel = channel_from_history(spec, history)
            value = channel.get() if channel.is_available() else MISSING
            return ChannelView(view.name, view.version, "rebuilt", value, seed, writes)
        note = f"not rebuilt: a value could not be loaded ({bad.reason})"
        return ChannelView(view.name, view.version, "delta", MISSING, seed, writes, note)
    return ChannelView(view.name, view.version, "delta", MISSING, seed, writes)


def write_views(
    db: Reader, writes: Sequence[RawWrite], steps: Mapping[str, int | None]
) -> list[WriteView]:
    return [
        WriteView(
            w.checkpoint_id,
            steps.get(w.checkpoint_id),
            w.task_id,
            w.task_path,
            w.idx,
            w.channel,
            db.load(w.raw),
        )
        for w in writes
    ]


def load_raw(db: Reader, thread_id: str, ns: str, checkpoint_id: str) -> RawTuple:
    raw = db.raw_tuple(thread_id, ns, checkpoint_id)
    if raw is None:
        raise CheckpointNotFoundError(f"unknown checkpoint {checkpoint_id!r} in {thread_id!r}")
    return raw


def state_view(
    db: Reader,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    specs: Mapping[str, AnyChannel] | None = None,
) -> StateView:
    """The full state at a checkpoint, its pending writes and metadata."""
    raw = load_raw(db, thread_id, ns, checkpoint_id)
    step = _step(raw.metadata)
    pending = write_views(db, raw.writes, {checkpoint_id: step})
    return StateView(
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        parent_id=raw.parent_id,
        ts=raw.record.get("ts"),
        step=step,
        source=raw.metadata.get("source"),
        metadata=raw.metadata,
        channels=channel_views(db, raw, specs),
        pending_writes=pending,
        interrupts=pending_interrupts(raw.writes, db.load),
    )


# --------------------------------------------------------------------------- diff
Relation = Literal["same", "ancestor", "descendant", "diverged", "unrelated"]


@dataclass(slots=True)
class ChannelDiff:
    """One channel that differs between A and B.

    `writes_to_b` are the pending writes on the path from the common ancestor to B's parent
    (when A is an ancestor of B: exactly the writes between A and B); `writes_to_a` the same
    on A's side (empty unless the two are on different branches).
    """

    channel: str
    status: Literal["added", "removed", "changed"]
    a: ChannelView | None
    b: ChannelView | None
    writes_to_a: list[WriteView] = field(default_factory=list)
    writes_to_b: list[WriteView] = field(default_factory=list)


@dataclass(slots=True)
class DiffView:
    thread_id: str
    checkpoint_ns: str
    a: str
    b: str
    step_a: int | None
    step_b: int | None
    relation: Relation
    common_ancestor: str | None
    channels: list[ChannelDiff]
    unchanged: list[str]


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:  # a value whose == raises is not known equal
        return False


def _path_from(walk: list[Ancestor], common: str | None) -> list[Ancestor]:
    """The checkpoints whose pending writes lead from `common` down to the walk's start
    (depth 0), oldest first.

    A checkpoint's writes count when the next checkpoint on the path took a step from it;
    a child at the same step as its parent is a copy (a fork) that applied none of them:
    they made another child.
    """
    ids = [a.checkpoint_id for a in walk]
    end = ids.index(common) if common is not None and common in ids else len(ids) - 1
    path: list[Ancestor] = []
    for i in range(1, end + 1):
        child, parent = walk[i - 1], walk[i]
        if child.step is None or parent.step is None or child.step != parent.step:
            path.append(parent)
    return list(reversed(path))


FIRST_WALK = 16
"""Depth of the first ancestor walks a diff makes; they double until the two meet."""


def _ended(walk: list[Ancestor], depth: int) -> bool:
    """Whether a walk asked for `depth` levels stopped short: it reached the root (or a
    missing parent, or a loop), so it holds the whole ancestry."""
    return len(walk) <= depth


def _walks_to_common(
    db: Reader, thread_id: str, ns: str, a_id: str, b_id: str
) -> tuple[list[Ancestor], list[Ancestor], str | None]:
    """(A's walk, B's walk, their nearest common ancestor), each walk reaching at least
    that ancestor; the whole ancestries only when the two share none.

    Walks of growing depth (16, 32, ...): a diff against a near checkpoint (its parent, a
    sibling) costs the distance to the common ancestor, not the thread's length. The
    ancestor found is the one the whole walks would give: the first checkpoint of A's walk
    that B's walk holds. (A's chain is a line: a later match X is an ancestor of the
    nearest match C, and B's walk, holding X, holds C, which comes before X on B's chain.)
    """
    depth = FIRST_WALK
    while True:
        walk_a = db.ancestors(thread_id, ns, a_id, depth)
        walk_b = db.ancestors(thread_id, ns, b_id, depth)
        ids_b = {a.checkpoint_id for a in walk_b}
        common = next((a.checkpoint_id for a in walk_a if a.checkpoint_id in ids_b), None)
        done = _ended(walk_a, depth) and _ended(walk_b, depth)
        if common is not None or done or depth >= MAX_WALK:
            return walk_a, walk_b, common
        depth = min(depth * 2, MAX_WALK)


def diff_view(
    db: Reader,
    thread_id: str,
    ns: str,
    a_id: str,
    b_id: str,
    specs: Mapping[str, AnyChannel] | None = None,
) -> DiffView:
    """Per channel, what changed from checkpoint A to checkpoint B."""
    raw_a = load_raw(db, thread_id, ns, a_id)
    raw_b = load_raw(db, thread_id, ns, b_id)
    walk_a, walk_b, common = _walks_to_common(db, thread_id, ns, a_id, b_id)
    relation: Relation
    if a_id == b_id:
        relation = "same"
    elif common == a_id:
        relation = "ancestor"
    elif common == b_id:
        relation = "descendant"
    elif common is not None:
        relation = "diverged"
    else:
        relation = "unrelated"
    versions_a: dict[str, Any] = raw_a.record.get("channel_versions") or {}
    versions_b: dict[str, Any] = raw_b.record.get("channel_versions") or {}
    names = sorted(set(versions_a) | set(versions_b))
    changed = {n for n in names if str(versions_a.get(n)) != str(versions_b.get(n))}
    unchanged = [n for n in names if n not in changed]
    views_a = channel_views(db, raw_a, specs, changed) if relation != "same" else {}
    views_b = channel_views(db, raw_b, specs, changed) if relation != "same" else {}

    delta_channels = sorted(
        n
        for n in changed
        if any(
            v is not None and (v.kind in ("delta", "rebuilt") or v.seed is not None)
            for v in (views_a.get(n), views_b.get(n))
        )
        or (specs is not None and _spec_rebuilds(specs.get(n)))
    )
    path_a = _path_from(walk_a, common)
    path_b = _path_from(walk_b, common)
    steps = {a.checkpoint_id: a.step for a in [*walk_a, *walk_b]}
    order = {a.checkpoint_id: i for i, a in enumerate([*path_a, *path_b])}
    path_ids = list(dict.fromkeys(a.checkpoint_id for a in [*path_a, *path_b]))
    raw_writes = db.raw_writes(thread_id, ns, path_ids, delta_channels)
    raw_writes.sort(key=lambda w: (order[w.checkpoint_id], w.task_path, w.task_id, w.idx))
    all_writes = write_views(db, raw_writes, steps)
    ids_a = {a.checkpoint_id for a in path_a}
    ids_b_path = {a.checkpoint_id for a in path_b}

    for name in sorted(changed):
        # A new version can hold an equal value (a node rewrote it unchanged): no change.
        va, vb = views_a.get(name), views_b.get(name)
        if (
            va is not None
            and vb is not None
            and va.has_value
            and vb.has_value
            and not isinstance(va.value, Unloadable)
            and _equal(va.value, vb.value)
        ):
            changed.discard(name)
            unchanged.append(name)
    unchanged.sort()
    diffs: list[ChannelDiff] = []
    for name in sorted(changed):
        status: Literal["added", "removed", "changed"] = (
            "added"
            if name not in versions_a
            else "removed"
            if name not in versions_b
            else "changed"
        )
        diffs.append(
            ChannelDiff(
                channel=name,
                status=status,
                a=views_a.get(name),
                b=views_b.get(name),
                writes_to_a=[
                    w for w in all_writes if w.channel == name and w.checkpoint_id in ids_a
                ],
                writes_to_b=[
                    w for w in all_writes if w.channel == name and w.checkpoint_id in ids_b_path
                ],
            )
        )
    return DiffView(
        thread_id=thread_id,
        checkpoint_ns=ns,
        a=a_id,
        b=b_id,
        step_a=_step(raw_a.metadata),
        step_b=_step(raw_b.metadata),
        relation=relation,
        common_ancestor=common,
        channels=diffs,
        unchanged=unchanged,
    )


# --------------------------------------------------------------------------- effects
@dataclass(slots=True)
class ThreadEffect:
    """What an operation removed (or, in a dry run, would remove) from one thread."""

    thread_id: str
    checkpoints_before: int
    removed: list[tuple[str, str, int | None]]
    """(namespace, checkpoint id, step) of each removed checkpoint, oldest first."""
    writes_removed: int
    blobs_removed: int
    bytes_reclaimed: int

    @property
    def checkpoints_kept(self) -> int:
        return self.checkpoints_before - len(self.removed)


def effects(before: Footprint, after: Footprint, thread_ids: Sequence[str]) -> list[ThreadEffect]:
    """Per thread, the difference between two footprints."""
    out: list[ThreadEffect] = []
    for thread_id in thread_ids:
        gone = sorted(
            (ns, cid, step)
            for (t, ns, cid), step in before.checkpoints.items()
            if t == thread_id and (t, ns, cid) not in after.checkpoints
        )
        out.append(
            ThreadEffect(
                thread_id=thread_id,
                checkpoints_before=sum(1 for key in before.checkpoints if key[0] == thread_id),
                removed=gone,
                writes_removed=before.writes.get(thread_id, 0) - after.writes.get(thread_id, 0),
                blobs_removed=before.blobs.get(thread_id, 0) - after.blobs.get(thread_id, 0),
                bytes_reclaimed=before.bytes.get(thread_id, 0) - after.bytes.get(thread_id, 0),
            )
        )
    return out


class _RolledBack(Exception):
    """Ends a dry run's transaction (the executor rolls back) carrying what it measured."""

    def __init__(self, result: tuple[Footprint, Footprint]) -> None:
        super().__init__("dry run")
        self.result = result


def simulate(db: Database, thread_ids: Sequence[str], action: Plan[Any]) -> list[ThreadEffect]:
    """Run `action` inside a transaction that is rolled back, measuring the threads before
    and after: a dry run that shows exactly what the real operation would remove."""

    def plan() -> Plan[None]:
        before = yield from footprint_plan(db.dialect, thread_ids)
        yield from action
        after = yield from footprint_plan(db.dialect, thread_ids)
        raise _RolledBack((before, after))

    try:
        db.run(plan(), txn=True)
    except _RolledBack as done:
        return effects(*done.result, thread_ids)
    raise AssertionError("unreachable: the dry-run plan always rolls back")  # pragma: no cover


def measure(db: Database, thread_ids: Sequence[str], action: Any) -> list[ThreadEffect]:
    """Run `action()` (a saver operation) and report what it removed from the threads."""
    before = db.run(footprint_plan(db.dialect, thread_ids))
    action()
    after = db.run(footprint_plan(db.dialect, thread_ids))
    return effects(before, after, thread_ids)
