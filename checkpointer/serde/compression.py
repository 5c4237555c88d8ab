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
)
from checkpointer.serde.base import Serializer

ZSTD_SUFFIX = "+zstd"
DEFAULT_THRESHOLD = 1024
DEFAULT_LEVEL = 3
DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024
"""Upper bound on one decompressed value (256 MiB): larger frames are refused on reading,
and never written (such a value is stored uncompressed). Read when used, not imported."""


def _limit(max_size: int | None) -> int:
    return DEFAULT_MAX_DECOMPRESSED_SIZE if max_size is None else max_size


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "zstd compression needs the 'zstandard' package: pip install zstandard"
        ) from exc
    return zstandard


def compress(data: bytes, level: int = DEFAULT_LEVEL) -> bytes:
    """One zstd frame that records its content size and a checksum (so truncation and
    corruption are detected on the way back)."""
    zstd = _zstd()
    return bytes(
        zstd.ZstdCompressor(level=level, write_content_size=True, write_checksum=True).compress(
            data
        )
    )


def decompress(data: bytes, max_size: int | None = None) -> bytes:
    """Inverse of `compress`; refuses frames without a declared size or above `max_size`
    (None: `DEFAULT_MAX_DECOMPRESSED_SIZE`)."""
    max_size = _limit(max_size)
    zstd = _zstd()
    try:
        size = zstd.frame_content_size(data)
    except zstd.ZstdError as exc:
        raise DeserializationError(f"corrupt zstd frame: {exc}") from exc
    if size < 0:
        raise DeserializationError("corrupt zstd frame: it does not declare its content size")
    if size > max_size:
        raise DeserializationError(
            f"compressed value would expand to {size} bytes, over the {max_size}-byte limit"
        )
    try:
        out = zstd.ZstdDecompressor().decompress(data, max_output_size=max(size, 1))
    except zstd.ZstdError as exc:
        raise DeserializationError(f"corrupt or truncated zstd frame: {exc}") from exc
    if len(out) != size:
        raise DeserializationError(
            f"corrupt zstd frame: declared {size} bytes, decompressed {len(out)}"
        )
    return bytes(out)


def is_compressed(tag: str) -> bool:
    return isinstance(tag, str) and tag.endswith(ZSTD_SUFFIX)


def decompress_typed(data: tuple[str, bytes], max_size: int | None = None) -> tuple[str, bytes]:
    """A stored `(tag, bytes)` pair with any compression undone; other pairs unchanged."""
    if not isinstance(data, tuple) or len(data) != 2:
        return data
    tag, raw = data
    if not is_compressed(tag):
        return data
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise DeserializationError(f"expected bytes for tag {tag!r}, got {type(raw).__name__}")
    return tag[: -len(ZSTD_SUFFIX)], decompress(bytes(raw), max_size)


def load_typed(serde: Serializer, data: tuple[str, bytes], **where: str | None) -> Any:
    """What savers call to read a stored value: decompress if marked, then deserialize.

    `where` (thread_id, checkpoint_ns, checkpoint_id, channel, task_id, version) names the
    value's location: a value that cannot be read raises CorruptValueError saying where it
    is, so the damage can be found while the rest of the thread stays readable.
    """
    try:
        return serde.loads_typed(decompress_typed(data))
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
            from checkpointer.serde.msgpack_serde import default_serializer

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
        tag, data = self.inner.dumps_typed(obj)
        if len(data) < self.threshold or is_compressed(tag):
            return tag, data
        # Savers read every value through `decompress_typed` with the default bound, and
        # this serializer with its own: a frame over either could be written but never
        # read, so such a value is stored as it is.
        if len(data) > min(_limit(self.max_decompressed_size), _limit(None)):
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
        from checkpointer.serde.msgpack_serde import default_serializer

        _STORED_DEFAULT = CompressingSerializer(default_serializer())
    return _STORED_DEFAULT
