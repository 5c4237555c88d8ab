"""Channels that hold a single value: the default for a state key without a reducer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import BaseChannel, SingleValueChannel, Value
from checkpointer.channels.markers import MISSING
from checkpointer.errors import InvalidUpdateError

__all__ = ("LastValue", "LastValueAfterFinish")


class LastValue(Generic[Value], SingleValueChannel[Value]):
    """Holds the last value written; at most one write per step.

    Two parallel tasks writing the same plain key in one step is a race whose winner would
    depend on scheduling, so it is rejected instead of silently picking one.
    """

    __slots__ = ()

    def update(self, values: Sequence[Value]) -> bool:
        if not values:
            return False
        if len(values) > 1:
            raise InvalidUpdateError(
                f"At key {self.key!r}: received {len(values)} values in one step, but a plain "
                "key accepts only one value per step. Declare the key with a reducer, e.g. "
                f"`{self.key or 'key'}: Annotated[list, operator.add]`, to merge parallel writes."
            )
        self.value = values[0]
        return True


class LastValueAfterFinish(Generic[Value], BaseChannel[Value, Value, tuple[Value, bool]]):
    """Holds the last value written, readable only once the run finishes; reading clears it.

    Used for deferred nodes: they must run after everything else, so their trigger only
    becomes visible at `finish()`, and `consume()` resets it so the node runs once.
    """

    __slots__ = ("finished", "value")

    value: Value | Any
    finished: bool

    def __init__(self, typ: Any, key: str = "") -> None:
        super().__init__(typ, key)
        self.value = MISSING
        self.finished = False

    @property
    def ValueType(self) -> Any:
        return self.typ

    @property
    def UpdateType(self) -> Any:
        return self.typ

    def copy(self) -> Self:
        new = self.__class__(self.typ, self.key)
        new.value = self.value
        new.finished = self.finished
        return new

    def checkpoint(self) -> tuple[Value, bool] | Any:
        if self.value is MISSING:
            return MISSING
        return (self.value, self.finished)

    def from_checkpoint(self, checkpoint: tuple[Value, bool] | Any) -> Self:
        new = self.__class__(self.typ, self.key)
        if checkpoint is not MISSING:
            new.value, new.finished = checkpoint
        return new

    def update(self, values: Sequence[Value]) -> bool:
        if not values:
            return False
        self.value = values[-1]
        self.finished = False
        return True

    def consume(self) -> bool:
        if not self.finished:
            return False
        self.value = MISSING
        self.finished = False
        return True

    def finish(self) -> bool:
        if self.finished or self.value is MISSING:
            return False
        self.finished = True
        return True

    def get(self) -> Value:
        if self.value is MISSING or not self.finished:
            raise self._empty_error()
        return self.value

    def is_available(self) -> bool:
        return self.finished and self.value is not MISSING
