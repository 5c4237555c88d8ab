"""Everything the viewer reads or writes, behind one class over the CLI's readers.

`ReaderSource` reads through a `checkpointer.reader.Reader`, the same read-only readers the
CLI uses (`checkpointer.inspect.open_reader`): our databases and, through
`LangGraphReader`, those of LangGraph's own SQLite and Postgres savers, with one code path.
Skeletons, state and diffs come from `checkpointer.inspect` (delta channels rebuilt with the
reducers of `--graph`). The actions run the CLI's operations (`checkpointer fork`,
`fork --to`, `copy`) on a separate writable `Database`, given only for our own schema and
only when the viewer is not read-only; without one every action is refused. Export is the
CLI's (`checkpointer export`, of either kind of database). One lock: the server's worker
threads take turns on the connections.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from checkpointer.channels import BaseChannel
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
from checkpointer.lifecycle import THREAD_SORTS
from checkpointer.reader import Reader, ReadOnlyError
from checkpointer.savers.sql.inspect import SkeletonNode, ThreadSummary, existing_threads_plan
from checkpointer.savers.sql.transfer import (
    ForkResult,
    fork_in_place_plan,
    fork_to_thread_plan,
    refuse_bound_values_plan,
)
from checkpointer.ui.tree import Run, build_runs

AnyChannel = BaseChannel[Any, Any, Any]
__all__ = ["ReadOnlyError", "ReaderSource", "Source", "ThreadPage", "ThreadTree"]


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


class ReaderSource:
    """The viewer's data: reads through `reader` (any `Reader`), actions through `writer`
    (a writable `Database` of our schema; None makes the viewer read-only)."""

    can_export = True

    def __init__(
        self,
        reader: Reader,
        *,
        specs: Mapping[str, AnyChannel] | None = None,
        writer: Database | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.specs = specs
        self.read_only = writer is None
        self.where = reader.where
        self._lock = threading.RLock()
        self._trees: dict[tuple[str, str], tuple[tuple[str | None, int], ThreadTree]] = {}

    @contextmanager
    def _locked(self) -> Iterator[Reader]:
        with self._lock:
            yield self.reader

    def _writable(self, what: str) -> Database:
        if self.writer is None:
            raise ReadOnlyError(f"{self.where} is open read-only: cannot {what}")
        return self.writer

    # ------------------------------------------------------------------ reads
    def threads(self, *, sort: str, query: str, offset: int, limit: int) -> ThreadPage:
        """A page of threads, sorted as `checkpointer threads` sorts them. A search
        filters thread ids by substring first, then pages the matches."""
        if sort not in THREAD_SORTS:
            raise ValueError(f"unknown sort {sort!r}; expected one of {', '.join(THREAD_SORTS)}")
        with self._locked() as reader:
            if not query:
                total, found = reader.thread_summaries(sort, limit, offset)
                return ThreadPage(found, total, offset, limit, sort, query)
            needle = query.casefold()
            ids = [t for t in reader.all_thread_ids() if needle in t.casefold()]
            if not ids:
                return ThreadPage([], 0, offset, limit, sort, query)
            total, found = reader.thread_summaries(sort, limit, offset, thread_ids=ids)
            return ThreadPage(found, total, offset, limit, sort, query)

    def tree(self, thread_id: str, ns: str) -> ThreadTree:
        """The namespace's skeleton and runs; kept while the namespace's newest checkpoint
        and size stay the same (a fork or a new step changes one of them)."""
        with self._locked() as reader:
            namespaces = reader.namespaces(thread_id)
            if not namespaces:
                reader.require_threads([thread_id])
            key = (thread_id, ns)
            head = reader.namespace_head(thread_id, ns)
            cached = self._trees.get(key)
            if cached is not None and cached[0] == head:
                tree = cached[1]
                tree.namespaces = namespaces
                return tree
            nodes = reader.skeleton(thread_id, ns)
            parents = {cid: n.parent_id for cid, n in nodes.items()}
            tree = ThreadTree(
                thread_id, ns, namespaces, nodes, build_runs(parents), max(nodes, default=None)
            )
            self._trees[key] = (head, tree)
            if len(self._trees) > 32:
                self._trees.pop(next(iter(self._trees)))
            return tree

    def entries(self, tree: ThreadTree, ids: Sequence[str]) -> list[HistoryEntry]:
        with self._locked() as reader:
            return history_entries(tree.nodes, ids, reader.load)

    def state(self, thread_id: str, ns: str, checkpoint_id: str) -> StateView:
        with self._locked() as reader:
            return state_view(reader, thread_id, ns, checkpoint_id, self.specs)

    def diff(self, thread_id: str, ns: str, a: str, b: str) -> DiffView:
        with self._locked() as reader:
            return diff_view(reader, thread_id, ns, a, b, self.specs)

    def export(self, thread_id: str) -> str:
        """The thread as `checkpointer export` writes it (JSONL), of either kind of
        database."""
        from checkpointer.cli.transfer_cmds import exportable

        out = io.StringIO()
        with self._locked() as reader:
            reader.require_threads([thread_id])
            with exportable(reader, [thread_id]) as db:
                export_threads(db, [thread_id], out)
        return out.getvalue()

    # ------------------------------------------------------------------ writes
    def fork(self, thread_id: str, ns: str, checkpoint_id: str) -> ForkResult:
        """`checkpointer fork THREAD CHECKPOINT`: a copy of the checkpoint as the thread's
        new head, in one transaction."""
        db = self._writable("fork")
        with self._lock:
            return self._drop_cached(
                db.run(fork_in_place_plan(db.dialect, thread_id, ns, checkpoint_id), txn=True)
            )

    def copy_branch(self, thread_id: str, ns: str, checkpoint_id: str, target: str) -> ForkResult:
        """`checkpointer fork THREAD CHECKPOINT --to TARGET`: the branch ending at the
        checkpoint copied into a new thread (values and writes, so delta channels rebuild)."""
        db = self._writable("copy a branch")
        target = _target_name(target)
        with self._lock:
            return self._drop_cached(
                db.run(
                    fork_to_thread_plan(db.dialect, thread_id, target, ns, checkpoint_id),
                    txn=True,
                )
            )

    def copy_thread(self, thread_id: str, target: str) -> None:
        """`checkpointer copy`: the whole thread, every branch and namespace, through the
        saver's `copy_thread`."""
        db = self._writable("copy a thread")
        target = _target_name(target)
        if target == thread_id:
            raise ValueError("source and target are the same thread")
        with self._lock:
            db.require_threads([thread_id])
            if db.run(existing_threads_plan(db.dialect, [target])):
                raise ValueError(f"thread {target!r} already exists; pick another name")
            db.run(refuse_bound_values_plan(db.dialect, thread_id, f"copy thread {thread_id!r}"))
            db.saver.copy_thread(thread_id, target)

    def _drop_cached(self, result: ForkResult) -> ForkResult:
        self._trees.pop((result.thread_id, result.checkpoint_ns), None)
        return result


@contextmanager
def writer_for(
    reader: Reader, url: str, *, schema: str | None = None, read_only: bool = False
) -> Iterator[Database | None]:
    """A writable connection to the database `reader` reads, for the actions: only for our
    own schema (a LangGraph database is only ever read) and not when `read_only`."""
    if read_only or reader.kind != "checkpointer":
        yield None
        return
    with Database.open(url, schema=schema) as db:
        db.check_schema()
        yield db


@contextmanager
def open_source(
    url: str,
    *,
    schema: str | None = None,
    specs: Mapping[str, AnyChannel] | None = None,
    read_only: bool = False,
    serde: Any = None,
) -> Iterator[ReaderSource]:
    """The viewer's source for `url`: read through `open_reader` as the CLI reads, writable
    for the actions unless `read_only` or a LangGraph database."""
    from checkpointer.inspect import open_reader

    with (
        open_reader(url, schema=schema, serde=serde) as reader,
        writer_for(reader, url, schema=schema, read_only=read_only) as writer,
    ):
        yield ReaderSource(reader, specs=specs, writer=writer)


def _target_name(target: str) -> str:
    target = target.strip()
    if not target:
        raise ValueError("name the new thread")
    if len(target) > 512:
        raise ValueError("a thread id of at most 512 characters, please")
    return target
