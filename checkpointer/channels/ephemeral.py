"""A channel whose value lives for exactly one step: triggers, branch signals, inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import BaseChannel, Value
from checkpointer.channels.markers import MISSING
from checkpointer.errors import InvalidUpdateError

__all__ = ("EphemeralValue",)


class EphemeralValue(Generic[Value], BaseChannel[Value, Value, Value]):
    """Holds the value written in the previous step; a step without writes clears it.

    `guard=True` rejects several writes in one step (which one would win is arbitrary);
    `guard=False` keeps the last.
    """

    __slots__ = ("guard", "value")

    value: Value | Any
    guard: bool

    def __init__(self, typ: Any, guard: bool = True, *, key: str = "") -> None:
        super().__init__(typ, key)
        self.guard = guard
        self.value = MISSING

    def _config(self) -> tuple[Any, ...]:
        return (self.guard,)

    def __repr__(self) -> str:
        return f"EphemeralValue(key={self.key!r}, guard={self.guard})"

    @property
    def ValueType(self) -> Any:
        return self.typ

    @property
    def UpdateType(self) -> Any:
        return self.typ

    def copy(self) -> Self:
        new = self.__class__(self.typ, self.guard, key=self.key)
        new.value = self.value
        return new

    def from_checkpoint(self, checkpoint: Value | Any) -> Self:
        new = self.__class__(self.typ, self.guard, key=self.key)
        new.value = checkpoint
        return new

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

    def get(self) -> Value:
        if self.value is MISSING:
            raise self._empty_error()
        return self.value

    def is_available(self) -> bool:
        return self.value is not MISSING

    def checkpoint(self) -> Value | Any:
        return self.value
