"""The contract between savers and serializers.

Savers only ever store the `(tag, bytes)` pair a serializer hands them and give it back
unchanged; what the bytes mean is the serializer's business alone.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Serializer(Protocol):
    """Turns values into a `(tag, bytes)` pair and back.

    The tag lets a serializer pick a cheap representation per value (no encoding at all for
    `None` or raw bytes) and lets future formats coexist with data written by older ones.
    """

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Encode `obj`; raise `SerializationError` naming the type if it cannot."""
        ...

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decode a pair made by `dumps_typed`; raise `DeserializationError` on bad input."""
        ...
