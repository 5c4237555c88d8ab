"""A size limit for stored values: refuse a huge value before it reaches the database.

Without a limit a node that returns a 2 GB list makes every later read of the thread
slow, and on PostgreSQL fails somewhere deep in the driver (bytea tops out at 1 GB).
`SizeGuard(inner, max_bytes)` checks the serialized size on the way in and raises
`ValueTooLarge` naming the size and the limit; the saver serializes every value of a `put`
before it runs any statement, so nothing of the refused checkpoint is written.

    saver = SqliteSaver("app.db", serde=SizeGuard(MsgpackSerializer(), 8 * 1024 * 1024))

Wrapping order decides what is measured: `SizeGuard(CompressingSerializer(...))` limits the
stored (compressed) bytes, `CompressingSerializer(SizeGuard(...))` the raw encoding.
`max_load_bytes` optionally refuses oversized stored values on the way out as well (a
defence against a tampered database); by default reads are not limited.
"""

from __future__ import annotations

from typing import Any

from checkpointer.errors import DeserializationError, ValueTooLarge
from checkpointer.serde.base import Serializer
from checkpointer.serde.located import ValueLocation, dumps_at, is_located, loads_at

__all__ = ["SizeGuard"]


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__name__


class SizeGuard:
    """Wraps a serializer and refuses values whose serialized bytes exceed `max_bytes`."""

    def __init__(
        self, inner: Serializer, max_bytes: int, *, max_load_bytes: int | None = None
    ) -> None:
        for name, value in (("max_bytes", max_bytes), ("max_load_bytes", max_load_bytes)):
            if value is None and name == "max_load_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.inner = inner
        self.max_bytes = max_bytes
        self.max_load_bytes = max_load_bytes

    def __repr__(self) -> str:
        return f"SizeGuard({self.inner!r}, max_bytes={self.max_bytes})"

    @property
    def binds_location(self) -> bool:
        return is_located(self.inner)

    @property
    def stores_scalars_inline(self) -> bool:
        """As the inner serializer, unless the limit is below the largest inline value
        (which would then escape the check)."""
        from checkpointer.savers.sql.inline import INLINE_STORED_MAX

        inner = getattr(self.inner, "stores_scalars_inline", False) is True
        return inner and self.max_bytes >= INLINE_STORED_MAX

    def __getattr__(self, name: str) -> Any:
        # register(), with_types() ... of the wrapped serializer stay usable.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _check_out(self, obj: Any, data: bytes, location: ValueLocation | None) -> None:
        if len(data) > self.max_bytes:
            what = f"a {_type_name(obj)} value"
            if location is not None:
                what += f" ({location.describe()})"
            raise ValueTooLarge(len(data), self.max_bytes, what)

    def _check_in(self, data: tuple[str, bytes]) -> None:
        if self.max_load_bytes is None:
            return
        raw = data[1] if isinstance(data, tuple | list) and len(data) == 2 else b""
        size = len(raw) if isinstance(raw, bytes | bytearray | memoryview) else 0
        if size > self.max_load_bytes:
            raise DeserializationError(
                f"stored value is {size} bytes, over the read limit of {self.max_load_bytes}"
            )

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        tag, data = self.inner.dumps_typed(obj)
        self._check_out(obj, data, None)
        return tag, data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        self._check_in(data)
        return self.inner.loads_typed(data)

    def dumps_typed_at(self, obj: Any, location: ValueLocation) -> tuple[str, bytes]:
        tag, data = dumps_at(self.inner, obj, location)
        self._check_out(obj, data, location)
        return tag, data

    def loads_typed_at(self, data: tuple[str, bytes], location: ValueLocation) -> Any:
        self._check_in(data)
        return loads_at(self.inner, data, location)
