"""Everything the viewer reads or writes, behind one class, so other readers (LangGraph's own
databases, opened read-only) can plug in by offering the same methods.

`DatabaseSource` serves a checkpointer database through the library's public pieces: the
saver's thread summaries (`list_threads`), `checkpointer.inspect` for skeletons, state and
diffs (delta channels rebuilt with the reducers of `--graph`), and for writes the same
operations as the CLI (`checkpointer fork`, `fork --to`, `copy`, `export`). One connection,
so one lock: the server's worker threads take turns.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from checkpointer.channels import BaseChannel
from checkpointer.errors import CheckpointerError
from checkpointer.export import export_threads
from checkpointer.inspect import (
    Database,
    DiffView,
    HistoryEntry,
    StateView,
    diff_view,
    history_entries,
    state_view,
)
from checkpointer.lifecycle import THREAD_SORTS, ThreadSummary
from checkpointer.savers.sql.core import Plan, Stmt
from checkpointer.savers.sql.inspect import (
    SkeletonNode,
    all_thread_ids_plan,
    existing_threads_plan,
    skeleton_plan,
)
from checkpointer.savers.sql.transfer import (
    ForkResult,
    fork_in_place_plan,
    fork_to_thread_plan,
    refuse_bound_values_plan,
)
from checkpointer.ui.tree import Run, build_runs

AnyChannel = BaseChannel[Any, Any, Any]


class ReadOnlyError(CheckpointerError):
    """A write was asked of a database opened read-only."""


@dataclass(frozen=True, slots=True)
class ThreadPage:
    """One page of the thread list."""

    threads: list[ThreadSummary]
    total: int
    offset: int
    limit: int
    sort: str
    query: str


@dataclass(slots=True)
class ThreadTree:
    """A namespace of a thread: its skeleton, its runs and the visible rows' entries."""

    thread_id: str
    ns: str
    namespaces: list[str]
    nodes: dict[str, SkeletonNode]
    forest: list[Run]
    latest: str | None

    @property
    def heads(self) -> list[str]:
        has_child = {n.parent_id for n in self.nodes.values()}
        return sorted(cid for cid in self.nodes if cid not in has_child)


class Source(Protocol):
    """What the web app needs from a database."""

    where: str
    read_only: bool
    can_export: bool

    def threads(self, *, sort: str, query: str, offset: int, limit: int) -> ThreadPage: ...
    def tree(self, thread_id: str, ns: str) -> ThreadTree: ...
    def entries(self, tree: ThreadTree, ids: Sequence[str]) -> list[HistoryEntry]: ...
    def state(self, thread_id: str, ns: str, checkpoint_id: str) -> StateView: ...
    def diff(self, thread_id: str, ns: str, a: str, b: str) -> DiffView: ...
    def fork(self, thread_id: str, ns: str, checkpoint_id: str) -> ForkResult: ...
    def copy_branch(
        self, thread_id: str, ns: str, checkpoint_id: str, target: str
    ) -> ForkResult: ...
    def copy_thread(self, thread_id: str, target: str) -> None: ...
    def export(self, thread_id: str) -> str: ...


def _namespaces_plan(db: Database, thread_id: str) -> Plan[list[str]]:
    rows = yield Stmt(
        f"SELECT DISTINCT checkpoint_ns FROM {db.dialect.checkpoints} "
        f"WHERE thread_id = {db.dialect.p('t')} ORDER BY checkpoint_ns",
        {"t": thread_id},
        fetch=True,
    )
    return [str(r[0]) for r in rows]


class DatabaseSource:
    """A checkpointer database (SQLite or PostgreSQL), opened by `checkpointer.inspect`."""

    can_export = True

    def __init__(
        self,
        db: Database,
        *,
        specs: Mapping[str, AnyChannel] | None = None,
        read_only: bool = False,
    ) -> None:
        self.db = db
        self.specs = specs
        self.read_only = read_only
        self.where = db.where
        self._lock = threading.RLock()
        self._trees: dict[tuple[str, str], tuple[tuple[str | None, int], ThreadTree]] = {}

    @contextmanager
    def _locked(self) -> Iterator[Database]:
        with self._lock:
            yield self.db

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"{self.where} is open read-only: cannot {what}")

    # ------------------------------------------------------------------ reads
    def threads(self, *, sort: str, query: str, offset: int, limit: int) -> ThreadPage:
        """A page of threads, sorted by the saver's summary table (one indexed read). A
        search filters thread ids by substring first, then pages the matches."""
        if sort not in THREAD_SORTS:
            raise ValueError(f"unknown sort {sort!r}; expected one of {', '.join(THREAD_SORTS)}")
        descending = sort != "id"
        with self._locked() as db:
            if query:
                needle = query.casefold()
                ids = [t for t in db.run(all_thread_ids_plan(db.dialect)) if needle in t.casefold()]
                found = (
                    db.saver.list_threads(
                        sort=sort,  # type: ignore[arg-type]
                        descending=descending,
                        limit=limit,
                        offset=offset,
                        thread_ids=ids,
                    )
                    if ids
                    else []
                )
                return ThreadPage(found, len(ids), offset, limit, sort, query)
            found = db.saver.list_threads(
                sort=sort,  # type: ignore[arg-type]
                descending=descending,
                limit=limit,
                offset=offset,
            )
            total = len(db.run(all_thread_ids_plan(db.dialect)))
        return ThreadPage(found, total, offset, limit, sort, query)

    def tree(self, thread_id: str, ns: str) -> ThreadTree:
        """The namespace's skeleton and runs; kept while the namespace's newest checkpoint
        and size stay the same (a fork or a new step changes one of them)."""
        with self._locked() as db:
            namespaces = db.run(_namespaces_plan(db, thread_id))
            if not namespaces:
                db.require_threads([thread_id])
            key = (thread_id, ns)
            head = db.run(_head_plan(db, thread_id, ns))
            cached = self._trees.get(key)
            if cached is not None and cached[0] == head:
                tree = cached[1]
                tree.namespaces = namespaces
                return tree
            nodes = db.run(skeleton_plan(db.dialect, thread_id, ns))
            parents = {cid: n.parent_id for cid, n in nodes.items()}
            tree = ThreadTree(
                thread_id, ns, namespaces, nodes, build_runs(parents), max(nodes, default=None)
            )
            self._trees[key] = (head, tree)
            if len(self._trees) > 32:
                self._trees.pop(next(iter(self._trees)))
            return tree

    def entries(self, tree: ThreadTree, ids: Sequence[str]) -> list[HistoryEntry]:
        with self._locked() as db:
            return history_entries(tree.nodes, ids, db.load)

    def state(self, thread_id: str, ns: str, checkpoint_id: str) -> StateView:
        with self._locked() as db:
            return state_view(db, thread_id, ns, checkpoint_id, self.specs)

    def diff(self, thread_id: str, ns: str, a: str, b: str) -> DiffView:
        with self._locked() as db:
            return diff_view(db, thread_id, ns, a, b, self.specs)

    def export(self, thread_id: str) -> str:
        """The thread as `checkpointer export` writes it (JSONL)."""
        out = io.StringIO()
        with self._locked() as db:
            db.require_threads([thread_id])
            export_threads(db, [thread_id], out)
        return out.getvalue()

    # ------------------------------------------------------------------ writes
    def fork(self, thread_id: str, ns: str, checkpoint_id: str) -> ForkResult:
        """`checkpointer fork THREAD CHECKPOINT`: a copy of the checkpoint as the thread's
        new head, in one transaction."""
        self._writable("fork")
        with self._locked() as db:
            return self._drop_cached(
                db.run(fork_in_place_plan(db.dialect, thread_id, ns, checkpoint_id), txn=True)
            )

    def copy_branch(self, thread_id: str, ns: str, checkpoint_id: str, target: str) -> ForkResult:
        """`checkpointer fork THREAD CHECKPOINT --to TARGET`: the branch ending at the
        checkpoint copied into a new thread (values and writes, so delta channels rebuild)."""
        self._writable("copy a branch")
        target = _target_name(target)
        with self._locked() as db:
            return self._drop_cached(
                db.run(
                    fork_to_thread_plan(db.dialect, thread_id, target, ns, checkpoint_id),
                    txn=True,
                )
            )

    def copy_thread(self, thread_id: str, target: str) -> None:
        """`checkpointer copy`: the whole thread, every branch and namespace, through the
        saver's `copy_thread`."""
        self._writable("copy a thread")
        target = _target_name(target)
        if target == thread_id:
            raise ValueError("source and target are the same thread")
        with self._locked() as db:
            db.require_threads([thread_id])
            if db.run(existing_threads_plan(db.dialect, [target])):
                raise ValueError(f"thread {target!r} already exists; pick another name")
            db.run(refuse_bound_values_plan(db.dialect, thread_id, f"copy thread {thread_id!r}"))
            db.saver.copy_thread(thread_id, target)

    def _drop_cached(self, result: ForkResult) -> ForkResult:
        self._trees.pop((result.thread_id, result.checkpoint_ns), None)
        return result


def _head_plan(db: Database, thread_id: str, ns: str) -> Plan[tuple[str | None, int]]:
    """(newest checkpoint id, checkpoint count) of a namespace: what a cached tree is keyed
    by."""
    rows = yield Stmt(
        f"SELECT MAX(checkpoint_id), COUNT(*) FROM {db.dialect.checkpoints} "
        f"WHERE thread_id = {db.dialect.p('t')} AND checkpoint_ns = {db.dialect.p('ns')}",
        {"t": thread_id, "ns": ns},
        fetch=True,
    )
    newest, count = rows[0] if rows else (None, 0)
    return (None if newest is None else str(newest), int(count or 0))


def _target_name(target: str) -> str:
    target = target.strip()
    if not target:
        raise ValueError("name the new thread")
    if len(target) > 512:
        raise ValueError("a thread id of at most 512 characters, please")
    return target
