"""The SQL put path's shortcuts keep what a put stores and raises: the record's JSON
through a prebuilt C encoder, the serializer's traits asked once per serializer, the
executor's direct route to this thread's connection."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointer.errors import SerializationError, StorageBusyError
from checkpointer.ids import new_checkpoint_id
from checkpointer.savers.sql.records import encode_record, record_json
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde.encryption import EncryptedSerializer
from checkpointer.types import empty_checkpoint, make_config

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _same_json(a: str, b: str) -> None:
    # NaN is not equal to itself: compare the texts, which are what is stored.
    assert a == b


@settings(max_examples=300, deadline=None)
@given(
    fields=st.dictionaries(
        st.text(max_size=8).filter(lambda k: k not in ("id", "channel_values")),
        json_values,
        max_size=5,
    ),
    inline=st.dictionaries(
        st.text(max_size=8), st.none() | st.booleans() | st.integers() | st.text(), max_size=3
    ),
)
def test_record_text_is_json_dumps(fields: dict[str, Any], inline: dict[str, Any]) -> None:
    """A record is the checkpoint minus its values and id, inline values first, as
    `json.dumps(ensure_ascii=False, separators=(",", ":"))` writes it (NaN included)."""
    checkpoint: dict[str, Any] = {"id": "x", "channel_values": {"a": 1}, **fields}
    expected: dict[str, Any] = {"channel_values": inline} if inline else {}
    expected.update(fields)
    _same_json(encode_record(checkpoint, inline), _dumps(expected))  # type: ignore[arg-type]
    _same_json(record_json(expected), _dumps(expected))


class _Opaque:
    pass


def test_record_errors_stay_serialization_errors_and_leave_the_encoder_usable() -> None:
    circular: list[Any] = []
    circular.append(circular)
    for bad in (_Opaque(), circular, {("t",): 1}):
        checkpoint: dict[str, Any] = {"id": "x", "channel_values": {}, "v": 4, "bad": bad}
        with pytest.raises(SerializationError, match="not JSON-serializable"):
            encode_record(checkpoint)  # type: ignore[arg-type]
        # The next record encodes as before (the encoder's circular-check state is reset).
        fine = {"id": "x", "channel_values": {}, "v": 4, "nested": [[1], {"a": [2]}]}
        assert encode_record(fine) == _dumps({"v": 4, "nested": [[1], {"a": [2]}]})  # type: ignore[arg-type]
    assert encode_record({"id": "x", "f": math.inf}) == '{"f":Infinity}'  # type: ignore[typeddict-unknown-key]


def _put(saver: SqliteSaver, thread_id: str, value: Any, parent: Any = None) -> Any:
    cp = empty_checkpoint()
    cp["id"] = new_checkpoint_id()
    cp["channel_versions"] = {"big": "1", "small": "1"}
    cp["channel_values"] = {"big": value, "small": 3}
    config = parent if parent is not None else make_config(thread_id, "")
    return saver.put(config, cp, {"step": 1}, {"big": "1", "small": "1"})


def test_a_serializer_swapped_on_a_saver_is_the_one_put_uses(tmp_path: Path) -> None:
    """The saver asks its serializer's traits (inline values, located values) once per
    serializer object: a serializer assigned later is asked afresh, and values put after
    the swap are sealed by it (nothing inline, nothing readable without its key)."""
    saver = SqliteSaver(str(tmp_path / "db.sqlite"))
    saver.setup()
    _put(saver, "plain", "x" * 10)
    key = bytes(range(32))
    saver.serde = EncryptedSerializer(MsgpackSerializer(), keys={"k": key}, active_key_id="k")
    config = _put(saver, "sealed", "SECRET-VALUE")
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"] == {
        "big": "SECRET-VALUE",
        "small": 3,
    }
    saver.close()
    raw = sqlite3.connect(tmp_path / "db.sqlite")
    records = [r[0] for r in raw.execute("SELECT checkpoint FROM checkpointer_checkpoints")]
    blobs = b"".join(r[0] for r in raw.execute("SELECT blob FROM checkpointer_blobs"))
    raw.close()
    assert any('"channel_values"' in r for r in records)  # the plain thread's inline value
    assert b"SECRET-VALUE" not in blobs
    assert not any("SECRET" in r for r in records)
    assert sum('"channel_values"' in r for r in records) == 1  # none inline after the swap


def test_a_locked_database_still_raises_storage_busy_on_put(tmp_path: Path) -> None:
    """A put on this thread's open connection (the executor's direct route) that finds
    another writer holding the lock past busy_timeout raises StorageBusyError."""
    path = str(tmp_path / "db.sqlite")
    saver = SqliteSaver(path, busy_timeout=0.05)
    saver.setup()
    _put(saver, "t", 1)  # this thread's connection is open now
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StorageBusyError):
            _put(saver, "t2", 2)
    finally:
        other.execute("ROLLBACK")
        other.close()
    _put(saver, "t3", 3)
    saver.close()


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("value", fn(*args))
    except Exception as exc:
        return ("error", type(exc))


_UUID = "3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b"
task_ids = st.sampled_from(
    [
        _UUID,
        _UUID.upper(),
        "task-1",
        "",
        "-0000003-9a4d-4e6f-8b7a-1c2d3e4f5a6b",
        "-0000000-9a4d-4e6f-8b7a-1c2d3e4f5a6b",
        "-0000999-9a4d-4e6f-8b7a-1c2d3e4f5a6b",
    ]
)
slots = st.lists(
    st.sampled_from([-4, -3, -2, -1]) | st.integers(min_value=-(2**25), max_value=2**25),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(task_id=task_ids, idxs=slots)
def test_write_keys_of_a_batch_are_each_writes_key(task_id: str, idxs: list[int]) -> None:
    """A put_writes encodes its task id once for the batch: the stored id and slots (or
    the error) are what `encode_write_key` gives write by write, on both dialects."""
    from checkpointer.savers.sql.postgres_dialect import PostgresDialect
    from checkpointer.savers.sql.sqlite_dialect import SqliteDialect

    for d in (PostgresDialect(), SqliteDialect()):

        def one_by_one(d: Any = d) -> tuple[Any, list[int]]:
            keys = [d.encode_write_key(task_id, i) for i in idxs]
            stored = keys[0][0] if keys else d.encode_write_key(task_id, 0)[0]
            return stored, [i for _, i in keys]

        assert _outcome(d.encode_write_keys, task_id, idxs) == _outcome(one_by_one)


@settings(max_examples=300, deadline=None)
@given(
    value=json_values.filter(
        lambda v: "NaN" not in json.dumps(v) and "Infinity" not in json.dumps(v)
    )
)
def test_metadata_text_is_json_dumps(value: Any) -> None:
    """Metadata is `json.dumps(sort_keys=True, ensure_ascii=False, separators=(",", ":"))`
    of it, through the per-thread encoder and its table of strings seen before."""
    from checkpointer.savers.base import dumps_json

    expected = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert dumps_json({"m": value, "again": value}) == (f'{{"again":{expected},"m":{expected}}}')


def test_strings_past_the_table_size_still_encode_as_json_dumps() -> None:
    from checkpointer.savers import base

    words = [f"w{i}\u00e9\n\x00\ud7ff" for i in range(base._QUOTED_ENTRIES * 2 + 7)]
    long = 'x"' * base._QUOTED_MAX_LENGTH
    for chunk in range(0, len(words), 500):
        record = {"id": "x", "channel_values": {}, "w": words[chunk : chunk + 500], "l": long}
        expected = {"w": record["w"], "l": long}
        assert encode_record(record) == _dumps(expected)  # type: ignore[arg-type]
        assert base.dumps_json(expected) == json.dumps(
            expected, sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )
