"""zstd frames and the `+zstd` tag suffix: what every reader needs to undo compression.

Kept apart from `compression` (which builds the compressing serializer on top of the default
msgpack one) so that the msgpack serializer can read compressed pairs without importing the
module that imports it: `msgpack_serde` -> `frames` <- `compression` -> `msgpack_serde`, no
cycle. Needs the `zstandard` package, imported on first use.
"""

from __future__ import annotations

import threading
from typing import Any

from checkpointer.errors import DeserializationError

ZSTD_SUFFIX = "+zstd"
DEFAULT_LEVEL = 1
"""zstd level 1: on a chat history (a 250-500 KB list of messages, rewritten at every step)
it compresses about twice as fast as level 3 for 11% more bytes (0.39 of the msgpack size
against 0.35); negative levels are hardly faster and keep 0.5-0.65. Values written at
level 3 by earlier versions read back as ever: a frame does not depend on its level."""
DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024
"""Upper bound on one decompressed value (256 MiB): larger frames are refused."""


def zstd_module() -> Any:
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "zstd compression needs the 'zstandard' package: pip install zstandard"
        ) from exc
    return zstandard


class _Contexts(threading.local):
    """This thread's zstd compressors (one per level) and decompressor: making one costs
    more than compressing a small value, and they are not thread-safe."""

    def __init__(self) -> None:
        self.compressors: dict[int, Any] = {}
        self.decompressor: Any = None


_CONTEXTS = _Contexts()


def compress(data: bytes, level: int = DEFAULT_LEVEL) -> bytes:
    """One zstd frame that records its content size and a checksum (so truncation and
    corruption are detected on the way back)."""
    compressor = _CONTEXTS.compressors.get(level)
    if compressor is None:
        compressor = zstd_module().ZstdCompressor(
            level=level, write_content_size=True, write_checksum=True
        )
        _CONTEXTS.compressors[level] = compressor
    return bytes(compressor.compress(data))


def limit_of(max_size: int | None) -> int:
    """`max_size`, or the module's bound when None (read at call time, so it can be tuned)."""
    return DEFAULT_MAX_DECOMPRESSED_SIZE if max_size is None else max_size


def decompress(data: bytes, max_size: int | None = None) -> bytes:
    """Inverse of `compress`; refuses frames without a declared size or above `max_size`
    (None: `DEFAULT_MAX_DECOMPRESSED_SIZE`)."""
    max_size = limit_of(max_size)
    zstd = zstd_module()
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
    decompressor = _CONTEXTS.decompressor
    if decompressor is None:
        decompressor = _CONTEXTS.decompressor = zstd.ZstdDecompressor()
    try:
        out = decompressor.decompress(data, max_output_size=max(size, 1))
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
