"""A pub/sub channel: every write of a step is kept, in order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import BaseChannel, Value
from checkpointer.channels.markers import MISSING

__all__ = ("Topic",)


def _flatten(values: Sequence[Value | list[Value]]) -> Iterator[Value]:
    for value in values:
        if isinstance(value, list):
            yield from value
        else:
            yield value


class Topic(Generic[Value], BaseChannel[Sequence[Value], Value | list[Value], list[Value]]):
    """Collects the values written in a step; a write that is a list adds each of its items.

    With `accumulate=False` (the default) every `update` call, including `update([])`, starts
    from empty, so the channel shows one step's messages; with `accumulate=True` values pile
    up across steps.
    """

    __slots__ = ("accumulate", "values")

    values: list[Value]

    def __init__(self, typ: Any, accumulate: bool = False, *, key: str = "") -> None:
        super().__init__(typ, key)
        self.accumulate = accumulate
        self.values = []

    def _config(self) -> tuple[Any, ...]:
        return (self.accumulate,)

    def __repr__(self) -> str:
        return f"Topic(key={self.key!r}, accumulate={self.accumulate})"

    @property
    def ValueType(self) -> Any:
        return Sequence[self.typ]  # type: ignore[name-defined]

    @property
    def UpdateType(self) -> Any:
        return self.typ | list[self.typ]  # type: ignore[name-defined]

    def copy(self) -> Self:
        new = self.__class__(self.typ, self.accumulate, key=self.key)
        new.values = list(self.values)
        return new

    def checkpoint(self) -> list[Value] | Any:
        # A copy, so later in-place appends cannot change what a saver was handed.
        return list(self.values) if self.values else MISSING

    def from_checkpoint(self, checkpoint: list[Value] | Any) -> Self:
        new = self.__class__(self.typ, self.accumulate, key=self.key)
        if checkpoint is MISSING or checkpoint is None:
            return new
        if isinstance(checkpoint, tuple):
            # Older LangGraph layout: (unique_values, values).
            checkpoint = checkpoint[1]
        new.values = list(checkpoint)
        return new

    def update(self, values: Sequence[Value | list[Value]]) -> bool:
        changed = False
        if not self.accumulate and self.values:
            self.values = []
            changed = True
        before = len(self.values)
        self.values.extend(_flatten(values))
        return changed or len(self.values) > before

    def get(self) -> Sequence[Value]:
        if not self.values:
            raise self._empty_error()
        return list(self.values)

    def is_available(self) -> bool:
        return bool(self.values)
