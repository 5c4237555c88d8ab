"""A reducer channel: folds every write into the value with a binary operator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import BaseChannel, Value, empty_value_of, operators_equal
from checkpointer.channels.markers import MISSING, DeltaSnapshot, get_overwrite
from checkpointer.errors import InvalidUpdateError

__all__ = ("BinaryOperatorAggregate",)


class BinaryOperatorAggregate(Generic[Value], BaseChannel[Value, Value, Value]):
    """`value = operator(value, write)` for each write of a step, in order.

    Starts from `typ()` when the type can be built without arguments (so `list` starts as
    `[]`), else from the first write. An `Overwrite(x)` write replaces the value with `x`;
    one step may hold only one, and writes after it in that step are dropped, as in LangGraph.
    """

    __slots__ = ("operator", "value")

    value: Value | Any

    def __init__(
        self, typ: Any, operator: Callable[[Value, Value], Value], *, key: str = ""
    ) -> None:
        super().__init__(typ, key)
        self.operator = operator
        self.value = empty_value_of(typ)

    def _same_config(self, other: Self) -> bool:
        return operators_equal(self.operator, other.operator)

    def __repr__(self) -> str:
        name = getattr(self.operator, "__qualname__", repr(self.operator))
        return f"BinaryOperatorAggregate(key={self.key!r}, operator={name})"

    @property
    def ValueType(self) -> Any:
        return self.typ

    @property
    def UpdateType(self) -> Any:
        return self.typ

    def copy(self) -> Self:
        new = self.__class__(self.typ, self.operator, key=self.key)
        new.value = self.value
        return new

    def from_checkpoint(self, checkpoint: Value | Any) -> Self:
        new = self.__class__(self.typ, self.operator, key=self.key)
        # A thread written while this key was a DeltaChannel stores its snapshots.
        if isinstance(checkpoint, DeltaSnapshot):
            checkpoint = checkpoint.value
        if checkpoint is not MISSING:
            new.value = checkpoint
        return new

    def update(self, values: Sequence[Value]) -> bool:
        if not values:
            return False
        overwritten = False
        for value in values:
            is_overwrite, new_value = get_overwrite(value)
            if is_overwrite:
                if overwritten:
                    raise InvalidUpdateError(
                        f"At key {self.key!r}: received more than one Overwrite in one step; "
                        "only one task per step may overwrite a reducer key."
                    )
                overwritten = True
                self.value = new_value
            elif overwritten:
                continue  # the Overwrite wins its step
            elif self.value is MISSING:
                self.value = value
            else:
                self.value = self.operator(self.value, value)
        return True

    def get(self) -> Value:
        if self.value is MISSING:
            raise self._empty_error()
        return self.value

    def is_available(self) -> bool:
        return self.value is not MISSING

    def checkpoint(self) -> Value | Any:
        return self.value
