"""What a checkpoint database reader offers the time-travel tools (CLI, web viewer).

Two readers implement `Reader`: `checkpointer.inspect.Database` (our own schema) and
`checkpointer.inspect_langgraph.LangGraphReader` (databases written by LangGraph's own
SQLite and PostgreSQL savers). `checkpointer.inspect.open_reader(url)` opens either,
detected from the tables it finds, read-only; the views in `checkpointer.inspect`
(`history`, `state_view`, `diff_view`) work on any of them:

    with open_reader("chat.db") as reader:
        total, threads = reader.thread_summaries(limit=10)
        entries = history(reader, "thread-1")
        state = state_view(reader, "thread-1", "", entries[0].checkpoint_id)

Readers return rows with values still serialized (`(type, bytes)` pairs, or `Loaded` for
a value the format only gives decoded) and load them one by one with `load`, which never
raises: a value that cannot be read comes back as an `Unloadable` saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from checkpointer.errors import CheckpointerError
from checkpointer.savers.sql.inspect import (
    Ancestor,
    RawHistoryRow,
    RawTuple,
    RawWrite,
    SkeletonNode,
    Stats,
    ThreadSummary,
)

ENCRYPTED_NO_KEY = "encrypted (no key given)"


class UnknownThreadError(CheckpointerError, LookupError):
    """A thread id names no thread in the database."""


class DatabaseUnavailableError(CheckpointerError):
    """The database could not be opened or reached."""


class ReadOnlyError(CheckpointerError):
    """A write was asked of a database opened for reading only."""


@dataclass(frozen=True, slots=True)
class Unloadable:
    """A stored value that could not be loaded (class not allowed, corrupt bytes, a key
    not given)."""

    type: str
    size: int
    reason: str

    def __repr__(self) -> str:
        if self.reason == ENCRYPTED_NO_KEY:
            return f"<{ENCRYPTED_NO_KEY}, {self.size} bytes>"
        return f"<unloadable value ({self.size} bytes): {self.reason}>"


@dataclass(frozen=True, slots=True)
class Loaded:
    """A value a reader already decoded (LangGraph's SQLite saver keeps a checkpoint's
    values inside its one serialized record, so they arrive decoded)."""

    value: Any
    size: int = 0


@dataclass(frozen=True, slots=True)
class Located:
    """A stored `(type, bytes)` pair with the place it is stored at (a
    `checkpointer.serde.located.ValueLocation`): what an encrypted value, bound to its
    place, needs to be read."""

    pair: tuple[str, bytes]
    location: Any


class Reader(Protocol):
    """A read-only view of one checkpoint database."""

    kind: str
    """"checkpointer" (our schema) or "langgraph" (LangGraph's savers' schema)."""
    where: str
    """Human description of the database, password masked."""

    def load(self, raw: Any) -> Any: ...

    def is_snapshot(self, raw: Any) -> bool:
        """Whether a stored value is a delta channel snapshot (told without loading it)."""
        ...

    def require_threads(self, thread_ids: Sequence[str]) -> None: ...

    def resolve(self, thread_id: str, ns: str, ref: str | None) -> str: ...

    def all_thread_ids(self) -> list[str]:
        """Every thread id, sorted (what a search filters and a total counts)."""
        ...

    def thread_summaries(
        self,
        sort: str = "updated",
        limit: int | None = None,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> tuple[int, list[ThreadSummary]]:
        """(number of threads, a sorted page of their summaries); `thread_ids` restricts
        both to those threads (a search's matches)."""
        ...

    def namespaces(self, thread_id: str) -> list[str]:
        """The thread's checkpoint namespaces, sorted ("" for the root); [] when the thread
        has no checkpoints."""
        ...

    def namespace_head(self, thread_id: str, ns: str) -> tuple[str | None, int]:
        """(newest checkpoint id, number of checkpoints) of one namespace: cheap, and
        changed by any new checkpoint (a viewer keys its cached tree by it)."""
        ...

    def skeleton(self, thread_id: str, ns: str) -> dict[str, SkeletonNode]: ...

    def raw_tuple(self, thread_id: str, ns: str, checkpoint_id: str) -> RawTuple | None: ...

    def delta_rows(
        self, thread_id: str, ns: str, checkpoint_id: str, channels: Sequence[str]
    ) -> list[RawHistoryRow]: ...

    def ancestors(
        self, thread_id: str, ns: str, checkpoint_id: str, max_depth: int
    ) -> list[Ancestor]: ...

    def raw_writes(
        self,
        thread_id: str,
        ns: str,
        checkpoint_ids: Sequence[str],
        channels: Sequence[str] | None = None,
    ) -> list[RawWrite]: ...

    def stats(self, thread_id: str | None = None, top: int = 10) -> Stats: ...


def raw_size(raw: Any) -> int:
    if isinstance(raw, Loaded):
        return raw.size
    if isinstance(raw, Located):
        raw = raw.pair
    try:
        return len(raw[1])
    except (TypeError, IndexError):
        return 0
