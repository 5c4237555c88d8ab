"""zstd compression of large values: chosen per value by size, readable by any saver
without settings, bounded and strict on the way back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import zstandard

from checkpointer.errors import DeserializationError
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde.compression import (
    ZSTD_SUFFIX,
    CompressingSerializer,
    compress,
    decompress,
    decompress_typed,
    load_typed,
)
from checkpointer.types import empty_checkpoint, make_config

LARGE = {"messages": ["hello world, " * 40 for _ in range(20)], "n": 7}


def test_small_values_stay_plain_and_large_ones_compress() -> None:
    serde = CompressingSerializer(threshold=1024)
    tag, data = serde.dumps_typed({"small": 1})
    assert tag == "msgpack"
    tag, data = serde.dumps_typed(LARGE)
    assert tag == "msgpack" + ZSTD_SUFFIX
    assert len(data) < len(MsgpackSerializer().dumps_typed(LARGE)[1]) / 5
    assert serde.loads_typed((tag, data)) == LARGE
    # Raw bytes keep their own tag, compressed the same way.
    tag, data = serde.dumps_typed(b"x" * 5000)
    assert tag == "bytes" + ZSTD_SUFFIX and serde.loads_typed((tag, data)) == b"x" * 5000


def test_incompressible_values_are_stored_as_they_are() -> None:
    noise = os.urandom(4096)
    assert CompressingSerializer(threshold=16).dumps_typed(noise) == ("bytes", noise)


def test_any_serializer_reads_compressed_values_through_the_savers() -> None:
    tag, data = CompressingSerializer().dumps_typed(LARGE)
    assert load_typed(MsgpackSerializer(), (tag, data)) == LARGE
    assert decompress_typed(("msgpack", b"\x01")) == ("msgpack", b"\x01")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_database_written_compressed_reads_back_without_compression(
    kind: str, tmp_path: Path
) -> None:
    def saver(serde: Any) -> Any:
        if kind == "memory":
            return InMemorySaver(serde=serde)
        s = SqliteSaver(tmp_path / "c.db", serde=serde)
        s.setup()
        return s

    writer = saver(CompressingSerializer(threshold=256))
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"state": LARGE, "small": [1]}
    checkpoint["channel_versions"] = {"state": "1", "small": "1"}
    config = writer.put(make_config("t"), checkpoint, {"step": 0}, {"state": "1", "small": "1"})
    writer.put_writes(config, [("state", LARGE)], "00000002-0000-8000-8000-000000000000")
    reader = writer if kind == "memory" else saver(None)
    if kind == "memory":
        reader.serde = MsgpackSerializer()  # settings changed since the data was written
    tup = reader.get_tuple(make_config("t"))
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {"state": LARGE, "small": [1]}
    assert tup.pending_writes == [("00000002-0000-8000-8000-000000000000", "state", LARGE)]
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(tmp_path / "c.db") as conn:
            tags = {r[0] for r in conn.execute("SELECT type FROM checkpointer_blobs")}
        assert tags == {"msgpack", "msgpack+zstd"}
        writer.close()
        reader.close()


def test_corrupt_truncated_and_oversized_frames_raise() -> None:
    frame = compress(b"a" * 10_000)
    assert decompress(frame) == b"a" * 10_000
    with pytest.raises(DeserializationError, match="corrupt"):
        decompress(b"not a zstd frame at all")
    with pytest.raises(DeserializationError):
        decompress(frame[: len(frame) // 2])
    damaged = bytearray(frame)
    damaged[-6] ^= 0xFF
    with pytest.raises(DeserializationError):
        decompress(bytes(damaged))
    with pytest.raises(DeserializationError, match="limit"):
        decompress(frame, max_size=1000)
    # A frame that does not declare its size could be a decompression bomb: refused.
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(b"b" * 100)
    with pytest.raises(DeserializationError, match="content size"):
        decompress(unsized)
    serde = CompressingSerializer(max_decompressed_size=100)
    with pytest.raises(DeserializationError):
        serde.loads_typed(("msgpack+zstd", frame))
    with pytest.raises(DeserializationError):
        load_typed(MsgpackSerializer(), ("msgpack+zstd", b"\x00garbage"))


def test_settings_are_validated_and_the_inner_serializer_stays_reachable() -> None:
    with pytest.raises(ValueError):
        CompressingSerializer(threshold=-1)
    with pytest.raises(ValueError):
        CompressingSerializer(level=99)
    inner = MsgpackSerializer()
    serde = CompressingSerializer(inner)
    assert serde.inner is inner and serde.allowed_types == inner.allowed_types
    assert "threshold=1024" in repr(serde)


def test_a_plain_msgpack_serializer_reads_compressed_values() -> None:
    from checkpointer.serde import MsgpackSerializer
    from checkpointer.serde.compression import CompressingSerializer

    value = {"text": "lorem ipsum " * 500}
    stored = CompressingSerializer(threshold=16).dumps_typed(value)
    assert stored[0].endswith("+zstd")
    assert MsgpackSerializer().loads_typed(stored) == value


# Written by the previous default (zstd level 3, before level 1 became the default): a value
# stored then must read back the same through every reader, whatever its level.
LEVEL_3_VALUE = {
    "messages": [{"speaker": "tool", "content": "hello world " * 120, "id": "m-1", "turn": 1}],
    "turn": (1, 2),
}
LEVEL_3_STORED = (
    "msgpack+zstd",
    bytes.fromhex(
        "28b52ffd64dc04750200340482a86d657373616765739184a7737065616b6572a4746f6f6ca7636f6e74"
        "656e74da05a068656c6c6f20776f726c6420a26964a36d2d31a47475726e0193c700020102020029c287"
        "c8fe1728ad12691e"
    ),
)


def test_values_written_at_the_previous_level_read_back(tmp_path: Path) -> None:
    assert load_typed(MsgpackSerializer(), LEVEL_3_STORED) == LEVEL_3_VALUE
    assert CompressingSerializer().loads_typed(LEVEL_3_STORED) == LEVEL_3_VALUE
    assert MsgpackSerializer().fast_loader()(LEVEL_3_STORED) == LEVEL_3_VALUE
    # Today's default writes level 1 frames that any level reads; the format is the same.
    tag, data = CompressingSerializer().dumps_typed(LEVEL_3_VALUE)
    assert tag == LEVEL_3_STORED[0]
    assert decompress(data) == decompress(LEVEL_3_STORED[1])
    assert compress(decompress(data), 3) == LEVEL_3_STORED[1]


def test_reused_zstd_contexts_recover_from_bad_frames_and_serve_each_thread() -> None:
    import threading

    good = compress(b"x" * 5000)
    for bad in (b"not a frame", good[:-3], good[:10]):
        with pytest.raises(DeserializationError):
            decompress(bad)
        assert decompress(good) == b"x" * 5000
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(200):
                payload = bytes([n]) * (1000 + i)
                assert decompress(compress(payload, 1 + n % 3)) == payload
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
