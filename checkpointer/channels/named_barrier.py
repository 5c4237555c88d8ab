"""Barrier channels: a node that waits for several named predecessors (join edges)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import BaseChannel, Value
from checkpointer.channels.markers import MISSING
from checkpointer.errors import InvalidUpdateError

__all__ = ("NamedBarrierValue", "NamedBarrierValueAfterFinish")


class _Barrier(Generic[Value], BaseChannel[Value, Value, Any]):
    """The names and the set of names seen so far, shared by both barrier kinds."""

    __slots__ = ("names", "seen")

    names: set[Value]
    seen: set[Value]

    def __init__(self, typ: Any, names: set[Value], *, key: str = "") -> None:
        super().__init__(typ, key)
        self.names = set(names)
        self.seen = set()

    def _config(self) -> tuple[Any, ...]:
        return (frozenset(self.names),)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r}, names={sorted(map(str, self.names))})"

    @property
    def ValueType(self) -> Any:
        return self.typ

    @property
    def UpdateType(self) -> Any:
        return self.typ

    def copy(self) -> Self:
        new = self.__class__(self.typ, self.names, key=self.key)
        new.seen = set(self.seen)
        return new

    def checkpoint(self) -> set[Value] | Any:
        return set(self.seen) if self.seen else MISSING

    def from_checkpoint(self, checkpoint: set[Value] | Any) -> Self:
        new = self.__class__(self.typ, self.names, key=self.key)
        if checkpoint is not MISSING and checkpoint is not None:
            new.seen = set(checkpoint)
        return new

    def _record(self, values: Sequence[Value]) -> bool:
        changed = False
        for value in values:
            if value not in self.names:
                raise InvalidUpdateError(
                    f"At key {self.key!r}: value {value!r} is not one of the awaited names "
                    f"{sorted(map(str, self.names))}."
                )
            if value not in self.seen:
                self.seen.add(value)
                changed = True
        return changed

    def update(self, values: Sequence[Value]) -> bool:
        return self._record(values)


class NamedBarrierValue(_Barrier[Value]):
    """Available (with value None) once every name in `names` was written; consuming resets it."""

    __slots__ = ()

    def get(self) -> Value:
        if self.seen != self.names:
            raise self._empty_error()
        return None  # type: ignore[return-value]  # a barrier carries no payload

    def is_available(self) -> bool:
        return self.seen == self.names

    def consume(self) -> bool:
        if self.seen != self.names:
            return False
        self.seen = set()
        return True


class NamedBarrierValueAfterFinish(_Barrier[Value]):
    """Like NamedBarrierValue, but a complete barrier opens only at `finish()` (deferred nodes)."""

    __slots__ = ("finished",)

    finished: bool

    def __init__(self, typ: Any, names: set[Value], *, key: str = "") -> None:
        super().__init__(typ, names, key=key)
        self.finished = False

    def copy(self) -> Self:
        new = super().copy()
        new.finished = self.finished
        return new

    def checkpoint(self) -> tuple[set[Value], bool] | Any:
        if not self.seen and not self.finished:
            return MISSING
        return (set(self.seen), self.finished)

    def from_checkpoint(self, checkpoint: tuple[set[Value], bool] | Any) -> Self:
        new = self.__class__(self.typ, self.names, key=self.key)
        if checkpoint is not MISSING and checkpoint is not None:
            seen, new.finished = checkpoint
            new.seen = set(seen)
        return new

    def get(self) -> Value:
        if not self.finished or self.seen != self.names:
            raise self._empty_error()
        return None  # type: ignore[return-value]

    def is_available(self) -> bool:
        return self.finished and self.seen == self.names

    def consume(self) -> bool:
        if not (self.finished and self.seen == self.names):
            return False
        self.seen = set()
        self.finished = False
        return True

    def finish(self) -> bool:
        if self.finished or self.seen != self.names:
            return False
        self.finished = True
        return True
