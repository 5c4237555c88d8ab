"""Optional zstd compression of large values, readable by every saver without settings.

`CompressingSerializer(inner, threshold=1024)` compresses a value's bytes when they are at
least `threshold` long and compression actually saves space, and marks it by appending
`+zstd` to the tag (`msgpack` -> `msgpack+zstd`). Small values stay as they are: below a
kilobyte zstd rarely pays for its frame header, and most pending writes are small.

Reading never depends on how a saver was configured: every saver passes stored pairs
through `decompress_typed` before its serializer sees them, so a database written with
compression reads back through a saver without it. Decompression is bounded
(`max_decompressed_size`) so a corrupt or hostile frame cannot exhaust memory; corrupt,
truncated or oversized data raises `DeserializationError`.

What is written always reads back: a value whose encoding is over the bound is stored
uncompressed (no frame to expand), never as a frame that every read would refuse.

Needs the `zstandard` package (imported on first use).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checkpointer.errors import (
    CorruptValueError,
    DecryptionError,
    DeserializationError,
    SerializationError,
    TypeNotAllowedError,
)
from checkpointer.serde.base import Serializer
from checkpointer.serde.frames import (
    DEFAULT_LEVEL,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    ZSTD_SUFFIX,
    compress,
    decompress,
    decompress_typed,
    is_compressed,
    limit_of,
)
from checkpointer.serde.frames import zstd_module as _zstd
from checkpointer.serde.msgpack_serde import default_serializer

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "DEFAULT_THRESHOLD",
    "ZSTD_SUFFIX",
    "CompressingSerializer",
    "compress",
    "database_default_serializer",
    "decompress",
    "decompress_typed",
    "fast_loader_of",
    "is_compressed",
    "load_typed",
]

DEFAULT_THRESHOLD = 1024


def load_typed(serde: Serializer, data: tuple[str, bytes], **where: str | None) -> Any:
    """What savers call to read a stored value: decompress if marked, then deserialize.

    `where` (thread_id, checkpoint_ns, checkpoint_id, channel, task_id, version) names the
    value's location: a value that cannot be read raises CorruptValueError saying where it
    is, so the damage can be found while the rest of the thread stays readable.
    """
    try:
        return serde.loads_typed(decompress_typed(data))
    except TypeNotAllowedError as exc:
        raise (exc.at(**where) if where else exc) from exc.__cause__
    except (CorruptValueError, DecryptionError):
        raise  # already located, or a key problem rather than damage: keep its type
    except DeserializationError as exc:
        if not where:
            raise
        raise CorruptValueError(str(exc), **where) from exc


def fast_loader_of(serde: Serializer) -> Callable[[tuple[str, bytes]], Any] | None:
    """A `loads_typed` for reading many values in one go, from serializers that offer one
    (the msgpack serializer: one set of hooks for the batch); None for others.

    It raises on anything it cannot read, without saying where: callers read that value
    again through `load_typed`, which raises the located error.
    """
    make_fast = getattr(serde, "fast_loader", None)
    return None if make_fast is None else make_fast()


class CompressingSerializer:
    """Wraps a serializer and zstd-compresses the values whose bytes reach `threshold`.

    ```python
    saver = SqliteSaver("app.db", serde=CompressingSerializer(MsgpackSerializer()))
    ```
    """

    def __init__(
        self,
        inner: Serializer | None = None,
        *,
        threshold: int = DEFAULT_THRESHOLD,
        level: int = DEFAULT_LEVEL,
        max_decompressed_size: int | None = None,
    ) -> None:
        if inner is None:
            inner = default_serializer()
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValueError(f"threshold must be an int >= 0, got {threshold!r}")
        if not -7 <= level <= 22:
            raise ValueError(f"zstd level must be between -7 and 22, got {level!r}")
        _zstd()  # fail at configuration time, not on the first large value
        self.inner = inner
        self.threshold = threshold
        self.level = level
        self.max_decompressed_size = max_decompressed_size

    def __repr__(self) -> str:
        return (
            f"CompressingSerializer({self.inner!r}, threshold={self.threshold}, level={self.level})"
        )

    def __getattr__(self, name: str) -> Any:
        # register(), with_types(), allowed_types... of the wrapped serializer stay usable.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.compress_typed(self.inner.dumps_typed(obj))

    def compress_typed(self, typed: tuple[str, bytes]) -> tuple[str, bytes]:
        """What `dumps_typed` stores for bytes the inner serializer made."""
        tag, data = typed
        if len(data) < self.threshold or is_compressed(tag):
            return tag, data
        # Savers read every value through `decompress_typed` with the default bound, and
        # this serializer with its own: a frame over either could be written but never
        # read, so such a value is stored as it is.
        if len(data) > min(limit_of(self.max_decompressed_size), limit_of(None)):
            return tag, data
        try:
            packed = compress(data, self.level)
        except Exception as exc:  # the zstd library's own errors
            raise SerializationError(f"zstd compression failed: {exc}") from exc
        if len(packed) >= len(data):
            return tag, data
        return tag + ZSTD_SUFFIX, packed

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(decompress_typed(data, self.max_decompressed_size))


_STORED_DEFAULT: CompressingSerializer | None = None


def database_default_serializer() -> CompressingSerializer:
    """What the SQLite and PostgreSQL savers use when given no serializer: the default
    msgpack serializer with values of a kilobyte or more zstd-compressed.

    A chat history rewritten at every step is most of a database's bytes; zstd keeps about
    a third of it, and writing less pays for the compression. The in-memory saver stays
    uncompressed: it has no disk to save.
    """
    global _STORED_DEFAULT
    if _STORED_DEFAULT is None:
        _STORED_DEFAULT = CompressingSerializer(default_serializer())
    return _STORED_DEFAULT
