"""A channel for values that must never reach storage (clients, secrets, caches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import SingleValueChannel, Value
from checkpointer.channels.markers import MISSING
from checkpointer.errors import InvalidUpdateError

__all__ = ("UntrackedValue",)


class UntrackedValue(Generic[Value], SingleValueChannel[Value]):
    """Holds the last value written, in memory only: `checkpoint()` is always MISSING.

    `copy()` still carries the value, so it survives within a run; a resumed run starts empty.
    """

    __slots__ = ("guard",)

    guard: bool

    def __init__(self, typ: Any, guard: bool = True, *, key: str = "") -> None:
        super().__init__(typ, key)
        self.guard = guard

    def _config(self) -> tuple[Any, ...]:
        return (self.guard,)

    def __repr__(self) -> str:
        return f"UntrackedValue(key={self.key!r}, guard={self.guard})"

    def _empty_like(self) -> Self:
        return self.__class__(self.typ, self.guard, key=self.key)

    def checkpoint(self) -> Any:
        return MISSING

    def from_checkpoint(self, checkpoint: Any) -> Self:
        # Whatever is passed is ignored: a stored value for this channel can only be stale.
        return self._empty_like()

    def update(self, values: Sequence[Value]) -> bool:
        if not values:
            return False
        if self.guard and len(values) > 1:
            raise InvalidUpdateError(
                f"At key {self.key!r}: UntrackedValue(guard=True) received {len(values)} values "
                "in one step but accepts only one; use guard=False to keep the last of them."
            )
        self.value = values[-1]
        return True
