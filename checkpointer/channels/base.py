"""The channel contract every kind implements, plus the type helpers the kinds share.

A channel holds one state key's value between supersteps and decides how the writes of one
step merge into it. The runtime only ever talks to channels through `BaseChannel`, and the
replay engine only through `checkpoint()` / `from_checkpoint()`, so a new kind needs nothing
but a subclass.
"""

from __future__ import annotations

import collections.abc
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Generic, NotRequired, Required, Self, get_origin

# TypeVar defaults (PEP 696) let `Topic(int)` type-check without spelling `Topic[int]`.
from typing_extensions import TypeVar

from checkpointer.channels.markers import MISSING
from checkpointer.errors import EmptyChannelError

Value = TypeVar("Value", default=Any)
Update = TypeVar("Update", default=Any)
Checkpoint = TypeVar("Checkpoint", default=Any)

__all__ = (
    "BaseChannel",
    "Checkpoint",
    "Update",
    "Value",
    "concrete_type",
    "empty_value_of",
    "operators_equal",
    "strip_extras",
    "takes_two_positional",
)

_ABSTRACT_TO_CONCRETE: dict[Any, type] = {
    collections.abc.Sequence: list,
    collections.abc.MutableSequence: list,
    collections.abc.Set: set,
    collections.abc.MutableSet: set,
    collections.abc.Mapping: dict,
    collections.abc.MutableMapping: dict,
}


def strip_extras(typ: Any) -> Any:
    """Peel `Annotated`, `Required` and `NotRequired` off a type, keeping what is inside.

    Unlike `concrete_type` this keeps generic parameters (`list[int]` stays `list[int]`),
    which is what a schema field's declared value type should report.
    """
    while True:
        origin = get_origin(typ)
        if origin is Annotated:
            typ = typ.__origin__
        elif origin in (Required, NotRequired):
            typ = typ.__args__[0]
        else:
            return typ


def concrete_type(typ: Any) -> Any:
    """The class to call for an empty value of `typ`: `list[int]` -> `list`, `Sequence` -> `list`.

    Abstract collection types cannot be instantiated, so they map to their usual concrete
    counterpart; anything else is returned unparameterized.
    """
    typ = strip_extras(typ)
    origin = get_origin(typ)
    if origin is not None:
        typ = origin
    return _ABSTRACT_TO_CONCRETE.get(typ, typ)


def empty_value_of(typ: Any) -> Any:
    """`typ()` when the type can be built with no arguments, else MISSING."""
    try:
        return concrete_type(typ)()
    except Exception:
        return MISSING


def operators_equal(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    """Whether two reducers count as the same one when schemas are merged.

    The same lambda written in two schemas (state and input) is two objects, so, as LangGraph
    does, any pairing with a lambda counts as equal; named callables must be the same object
    (or compare equal, e.g. bound methods of one instance).
    """
    if getattr(a, "__name__", None) == "<lambda>" or getattr(b, "__name__", None) == "<lambda>":
        return True
    return a is b or a == b


def takes_two_positional(func: Callable[..., Any]) -> bool:
    """Whether `func(a, b)` is a valid call: the shape of a binary reducer."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return True  # some builtins hide their signature; trust the user
    positional = [
        p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is p.empty]
    has_varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    required_kw = [
        p for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY and p.default is p.empty
    ]
    return len(required) <= 2 and (len(positional) >= 2 or has_varargs) and not required_kw


class BaseChannel(Generic[Value, Update, Checkpoint], ABC):
    """One state key: its current value and the rule that merges a step's writes into it.

    `key` is the state key the channel serves; every error message names it, because with
    dozens of keys an error that does not say which one is useless.
    """

    __slots__ = ("key", "typ")

    def __init__(self, typ: Any, key: str = "") -> None:
        self.typ = typ
        self.key = key

    # description

    @property
    @abstractmethod
    def ValueType(self) -> Any:
        """The type `get()` returns."""

    @property
    @abstractmethod
    def UpdateType(self) -> Any:
        """The type of one write accepted by `update()`."""

    def _config(self) -> tuple[Any, ...]:
        """What, besides the class, makes two channels of one kind interchangeable."""
        return ()

    def _same_config(self, other: Self) -> bool:
        return self._config() == other._config()

    def __eq__(self, other: object) -> bool:
        """Same kind and same merge rule; used to detect conflicting schema declarations."""
        if not isinstance(other, BaseChannel):
            return NotImplemented
        return type(self) is type(other) and self._same_config(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by config

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r})"

    def _empty_error(self) -> EmptyChannelError:
        return EmptyChannelError(f"channel {self.key!r} is empty ({type(self).__name__})")

    # persistence

    def checkpoint(self) -> Checkpoint | Any:
        """The value to store for this channel, or MISSING when there is nothing to store."""
        try:
            return self.get()
        except EmptyChannelError:
            return MISSING

    @abstractmethod
    def from_checkpoint(self, checkpoint: Checkpoint | Any) -> Self:
        """A new channel like this one, holding `checkpoint` (MISSING means empty).

        Must not alias mutable parts of `checkpoint`: the stored value may be kept by a saver.
        """

    def copy(self) -> Self:
        """An independent channel with the same value: updating one never changes the other."""
        return self.from_checkpoint(self.checkpoint())

    # reading

    @abstractmethod
    def get(self) -> Value:
        """The current value; raises EmptyChannelError (naming the key) when there is none."""

    def is_available(self) -> bool:
        """Whether `get()` would return a value."""
        try:
            self.get()
        except EmptyChannelError:
            return False
        return True

    # writing

    @abstractmethod
    def update(self, values: Sequence[Update]) -> bool:
        """Merge one step's writes (possibly none) and say whether the channel changed.

        The runtime calls `update([])` on channels that got no write in a step that ran
        tasks, so every kind must accept it; some use it to clear themselves.
        """

    def consume(self) -> bool:
        """A task subscribed to this channel ran; say whether that changed the channel."""
        return False

    def finish(self) -> bool:
        """The run is about to end; say whether the channel changed (and so the run goes on)."""
        return False


class SingleValueChannel(BaseChannel[Value, Value, Value]):
    """A channel holding one value (or MISSING): the storage, reads and copies that
    LastValue, AnyValue, EphemeralValue and UntrackedValue share; they differ in `update`."""

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

    def _empty_like(self) -> Self:
        """A new, empty channel with this one's settings."""
        return self.__class__(self.typ, key=self.key)

    def copy(self) -> Self:
        new = self._empty_like()
        new.value = self.value
        return new

    def from_checkpoint(self, checkpoint: Value | Any) -> Self:
        new = self._empty_like()
        new.value = checkpoint
        return new

    def get(self) -> Value:
        if self.value is MISSING:
            raise self._empty_error()
        return self.value

    def is_available(self) -> bool:
        return self.value is not MISSING

    def checkpoint(self) -> Value | Any:
        return self.value
