"""A channel for keys that many tasks may write in one step with the same value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import BaseChannel, Value
from checkpointer.channels.markers import MISSING

__all__ = ("AnyValue",)


class AnyValue(Generic[Value], BaseChannel[Value, Value, Value]):
    """Keeps the last of the step's writes, assuming they agree; a step without writes clears it.

    Clearing on `update([])` makes the value a per-step signal, as in LangGraph.
    """

    __slots__ = ("value",)

    value: Value | Any

    def __init__(self, typ: Any, key: str = "") -> None:
        super().__init__(typ, key)
        self.value = MISSING

    @property
    def ValueType(self) -> Any:
        return self.typ

    @property
    def UpdateType(self) -> Any:
        return self.typ

    def copy(self) -> Self:
        new = self.__class__(self.typ, self.key)
        new.value = self.value
        return new

    def from_checkpoint(self, checkpoint: Value | Any) -> Self:
        new = self.__class__(self.typ, self.key)
        new.value = checkpoint
        return new

    def update(self, values: Sequence[Value]) -> bool:
        if not values:
            had_value = self.value is not MISSING
            self.value = MISSING
            return had_value
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
