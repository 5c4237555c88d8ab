"""Values with a special meaning to channels, shared by channels, replay and the serializer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, NamedTuple


class _Missing:
    """Sentinel for "no value": distinct from None, which is a legitimate stored value."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()


class DeltaSnapshot(NamedTuple):
    """The full value of a DeltaChannel, stored on the checkpoints that snapshot it.

    Replay starts from the nearest one of these instead of the thread's first write.
    """

    value: Any


@dataclass(frozen=True, slots=True)
class Overwrite:
    """A write that replaces a reducer channel's value instead of being folded into it."""

    value: Any


def get_overwrite(value: Any) -> tuple[bool, Any]:
    """`(True, new_value)` if `value` asks to overwrite, else `(False, None)`.

    Besides `Overwrite(x)`, the dict form `{"__overwrite__": x}` is accepted, as it survives
    JSON round trips through APIs that cannot carry our types.
    """
    if isinstance(value, Overwrite):
        return True, value.value
    if isinstance(value, dict) and len(value) == 1 and "__overwrite__" in value:
        return True, value["__overwrite__"]
    return False, None
