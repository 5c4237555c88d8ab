"""A channel whose value lives for exactly one step: triggers, branch signals, inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import SingleValueChannel, Value
from checkpointer.channels.markers import MISSING
from checkpointer.errors import InvalidUpdateError

__all__ = ("EphemeralValue",)


class EphemeralValue(Generic[Value], SingleValueChannel[Value]):
    """Holds the value written in the previous step; a step without writes clears it.

    `guard=True` rejects several writes in one step (which one would win is arbitrary);
    `guard=False` keeps the last.
    """

    __slots__ = ("guard",)

    guard: bool

    def __init__(self, typ: Any, guard: bool = True, *, key: str = "") -> None:
        super().__init__(typ, key)
        self.guard = guard

    def _config(self) -> tuple[Any, ...]:
        return (self.guard,)

    def __repr__(self) -> str:
        return f"EphemeralValue(key={self.key!r}, guard={self.guard})"

    def _empty_like(self) -> Self:
        return self.__class__(self.typ, self.guard, key=self.key)

    def update(self, values: Sequence[Value]) -> bool:
        if not values:
            had_value = self.value is not MISSING
            self.value = MISSING
            return had_value
        if self.guard and len(values) > 1:
            raise InvalidUpdateError(
                f"At key {self.key!r}: EphemeralValue(guard=True) received {len(values)} values "
                "in one step but accepts only one; use guard=False to keep the last of them."
            )
        self.value = values[-1]
        return True
