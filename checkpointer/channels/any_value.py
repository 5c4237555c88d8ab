"""A channel for keys that many tasks may write in one step with the same value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic

from checkpointer.channels.base import SingleValueChannel, Value
from checkpointer.channels.markers import MISSING

__all__ = ("AnyValue",)


class AnyValue(Generic[Value], SingleValueChannel[Value]):
    """Keeps the last of the step's writes, assuming they agree; a step without writes clears it.

    Clearing on `update([])` makes the value a per-step signal, as in LangGraph.
    """

    __slots__ = ()

    def update(self, values: Sequence[Value]) -> bool:
        if not values:
            had_value = self.value is not MISSING
            self.value = MISSING
            return had_value
        self.value = values[-1]
        return True
