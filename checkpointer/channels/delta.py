"""A reducer channel persisted as its writes instead of its value (DESIGN 3.3).

A long list (chat messages) stored whole at every checkpoint makes storage grow with the
square of the thread length. A DeltaChannel stores nothing per checkpoint: its writes are
already saved as pending writes, so reading a checkpoint replays them onto the nearest
`DeltaSnapshot` that the replay engine wrote every `snapshot_frequency` updates.
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Callable, Sequence
from typing import Any, Generic, Self

from checkpointer.channels.base import BaseChannel, Value, concrete_type, operators_equal
from checkpointer.channels.markers import MISSING, DeltaSnapshot, get_overwrite
from checkpointer.errors import InvalidUpdateError
from checkpointer.ids import superstep_of

__all__ = ("DeltaChannel",)

Reducer = Callable[[Any, Sequence[Any]], Any]


class DeltaChannel(Generic[Value], BaseChannel[Value, Any, Any]):
    """Folds writes with a batched reducer: `reducer(state, [w1, w2, ...]) -> state`.

    The reducer must be deterministic and batching invariant,
    `reducer(reducer(s, xs), ys) == reducer(s, xs + ys)`, because replay folds many steps'
    writes in one call. An `Overwrite(x)` write replaces the value with `x` (a copy; None
    means an empty value) and, as in LangGraph, discards the other writes of its step.

    `typ` is the value type (`list` when omitted; `Annotated[T, DeltaChannel(...)]` in a
    schema supplies `T`). `snapshot_frequency` is how many updates may pass between two
    stored snapshots.
    """

    __slots__ = ("reducer", "snapshot_frequency", "value")

    value: Value | Any

    def __init__(
        self,
        reducer: Reducer,
        typ: Any = None,
        *,
        snapshot_frequency: int = 100,
        key: str = "",
    ) -> None:
        if (
            isinstance(snapshot_frequency, bool)
            or not isinstance(snapshot_frequency, int)
            or snapshot_frequency <= 0
        ):
            raise ValueError(
                f"DeltaChannel {key!r}: snapshot_frequency must be a positive int, "
                f"got {snapshot_frequency!r}"
            )
        super().__init__(list if typ is None else concrete_type(typ), key)
        self.reducer = reducer
        self.snapshot_frequency = snapshot_frequency
        self.value = MISSING

    def _same_config(self, other: Self) -> bool:
        return self.snapshot_frequency == other.snapshot_frequency and operators_equal(
            self.reducer, other.reducer
        )

    def __repr__(self) -> str:
        name = getattr(self.reducer, "__qualname__", repr(self.reducer))
        return (
            f"DeltaChannel(key={self.key!r}, reducer={name}, "
            f"snapshot_frequency={self.snapshot_frequency})"
        )

    @property
    def ValueType(self) -> Any:
        return self.typ

    @property
    def UpdateType(self) -> Any:
        return self.typ

    def _twin(self) -> Self:
        return self.__class__(
            self.reducer, self.typ, snapshot_frequency=self.snapshot_frequency, key=self.key
        )

    def _empty(self) -> Any:
        """A fresh empty value; MISSING when `typ` cannot be built without arguments."""
        try:
            return self.typ()
        except Exception:
            return MISSING

    def _base(self) -> Any:
        """The value to fold onto; an error naming the key if there is none to start from."""
        base = self.value if self.value is not MISSING else self._empty()
        if base is MISSING:
            raise InvalidUpdateError(
                f"At key {self.key!r}: DeltaChannel has no value and cannot build an empty "
                f"{self.typ!r}; declare a type that can be called with no arguments."
            )
        return base

    def _from_overwrite(self, value: Any) -> Any:
        # Copied so a reducer that mutates its state cannot change the stored write.
        if value is None:
            return self._base_empty()
        return _copy.copy(value)

    def _base_empty(self) -> Any:
        empty = self._empty()
        if empty is MISSING:
            raise InvalidUpdateError(
                f"At key {self.key!r}: Overwrite(None) needs an empty {self.typ!r}, which "
                "cannot be built without arguments."
            )
        return empty

    def copy(self) -> Self:
        new = self._twin()
        new.value = self.value if self.value is MISSING else _copy.copy(self.value)
        return new

    def checkpoint(self) -> Any:
        """Always MISSING: the replay engine stores `DeltaSnapshot(get())` when it decides to."""
        return MISSING

    def from_checkpoint(self, checkpoint: Any) -> Self:
        """MISSING or None: empty (writes get replayed); DeltaSnapshot: its value; else the value.

        A plain value is what a BinaryOperatorAggregate stored before the key became a delta
        channel, so migrated threads keep their state. Values are copied: the reducer may
        mutate its state in place, and the stored value may be held by a saver.
        """
        new = self._twin()
        if checkpoint is MISSING or checkpoint is None:
            new.value = self._empty()
        elif isinstance(checkpoint, DeltaSnapshot):
            new.value = _copy.copy(checkpoint.value)
        else:
            new.value = _copy.copy(checkpoint)
        return new

    def replay_writes(self, writes: Sequence[tuple[str, str, Any]]) -> None:
        """Fold stored `(task_id, channel, value)` writes, oldest first, in one reducer call.

        The last Overwrite becomes the new base and only the writes after it are folded.
        When task ids encode their superstep (`checkpointer.ids.task_id_for`), writes of the
        Overwrite's own step are dropped too, exactly as live `update` dropped them; so
        replaying a thread gives the value live execution had.
        """
        if not writes:
            return
        values = [value for _, _, value in writes]
        last_overwrite: int | None = None
        for i, value in enumerate(values):
            if get_overwrite(value)[0]:
                last_overwrite = i
        if last_overwrite is None:
            base, rest = self._base(), values
        else:
            base = self._from_overwrite(get_overwrite(values[last_overwrite])[1])
            rest = values[last_overwrite + 1 :]
            steps = _steps([task_id for task_id, _, _ in writes[last_overwrite:]])
            if steps is not None:
                rest = [v for v, step in zip(rest, steps[1:]) if step != steps[0]]
        self.value = self.reducer(base, rest) if rest else base

    def update(self, values: Sequence[Any]) -> bool:
        if not values:
            return False
        overwrite: tuple[bool, Any] | None = None
        for value in values:
            found = get_overwrite(value)
            if found[0]:
                if overwrite is not None:
                    raise InvalidUpdateError(
                        f"At key {self.key!r}: received more than one Overwrite in one step; "
                        "only one task per step may overwrite a reducer key."
                    )
                overwrite = found
        if overwrite is not None:
            self.value = self._from_overwrite(overwrite[1])
        else:
            self.value = self.reducer(self._base(), list(values))
        return True

    def get(self) -> Value:
        if self.value is MISSING:
            raise self._empty_error()
        return self.value

    def is_available(self) -> bool:
        return self.value is not MISSING


def _steps(task_ids: Sequence[str]) -> list[int] | None:
    """The superstep of each task id, or None when any id does not encode one."""
    try:
        return [superstep_of(task_id) for task_id in task_ids]
    except ValueError:
        return None
