"""The in-memory saver's put path stores what the general code would: metadata as
`dumps_json` text (or its error), the parent counts of `Namespace` kept right by every
change; and templates of `list` notice a checkpoint's versions or writes changing."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointer.errors import SerializationError
from checkpointer.savers.base import dumps_json
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.memory_store import (
    Namespace,
    StoredCheckpoint,
    metadata_json,
)
from checkpointer.savers.metadata import MAX_METADATA_DEPTH
from checkpointer.types import empty_checkpoint, make_config

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and infinities included: refused alike
    | st.text()  # lone surrogates included: refused alike
)
_json_like = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_metadata = st.dictionaries(st.text(max_size=12), _json_like, max_size=6)


def _outcome(fn: Any, value: Any) -> tuple[str, str]:
    try:
        return "ok", fn(value)
    except Exception as exc:  # the type and message must match
        return type(exc).__name__, str(exc)


@settings(max_examples=400, deadline=None)
@given(_metadata)
def test_metadata_json_is_dumps_json(metadata: dict[str, Any]) -> None:
    assert _outcome(metadata_json, metadata) == _outcome(dumps_json, metadata)


class _Odd:
    pass


def _circular() -> dict[str, Any]:
    value: dict[str, Any] = {"a": []}
    value["a"].append(value)
    return value


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"x": value}
    return value


@pytest.mark.parametrize(
    "metadata",
    [
        {"step": math.nan},
        {"step": math.inf},
        {"who": "\ud800"},
        {"obj": _Odd()},
        {"when": b"bytes"},
        {1: "int key"},
        {"mixed": {1: "a", "b": 2}},
        _circular(),
        _deep(MAX_METADATA_DEPTH + 5),
        _deep(MAX_METADATA_DEPTH - 2),
        {"text": "é ü 漢字", "list": ["[", "{"] * (MAX_METADATA_DEPTH + 1)},
        {"quotes": '"\\\n\t\x00\x7f\u2028'},
    ],
    ids=lambda m: repr(m)[:30],
)
def test_metadata_json_refuses_and_stores_as_dumps_json(metadata: dict[str, Any]) -> None:
    ours, theirs = _outcome(metadata_json, metadata), _outcome(dumps_json, metadata)
    assert ours == theirs
    if ours[0] == "ok":
        assert json.loads(ours[1]) == json.loads(theirs[1])


def test_put_refuses_bad_metadata_with_the_general_error() -> None:
    saver = InMemorySaver()
    for metadata in ({"step": math.nan}, {"obj": _Odd()}, _circular()):
        with pytest.raises(SerializationError) as caught:
            saver.put(make_config("t"), empty_checkpoint(), metadata, {})
        with pytest.raises(SerializationError) as general:
            dumps_json(metadata)
        assert str(caught.value) == str(general.value)
    assert list(saver.list(None)) == []


def _stored(parent: str | None) -> StoredCheckpoint:
    return StoredCheckpoint(("null", b""), "{}", parent, {}, None)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["set", "del", "pop", "ask"]),
            st.sampled_from("abcde"),
            st.none() | st.sampled_from("abcde"),
        ),
        max_size=30,
    )
)
def test_namespace_parent_counts_follow_every_change(
    ops: list[tuple[str, str, str | None]],
) -> None:
    namespace = Namespace()
    for op, checkpoint_id, parent in ops:
        if op == "set":
            namespace[checkpoint_id] = _stored(parent)
        elif op == "del" and checkpoint_id in namespace:
            del namespace[checkpoint_id]
        elif op == "pop":
            namespace.pop(checkpoint_id, None)
        expected = any(s.parent_id == checkpoint_id for s in namespace.values())
        assert namespace.is_named_as_parent(checkpoint_id) is expected


def test_a_list_template_notices_versions_and_writes_changed_behind_it() -> None:
    saver = InMemorySaver()
    config = make_config("t")
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"n": 1}
    checkpoint["channel_versions"] = {"n": "1"}
    config = saver.put(config, checkpoint, {"step": 0}, {"n": "1"})
    saver.put_writes(config, [("n", 5)], "task")
    first = list(saver.list(config))  # makes the template
    assert first[0].pending_writes == [("task", "n", 5)]
    stored = saver._threads["t"][""][config["configurable"]["checkpoint_id"]]
    next(iter(stored.writes.values())).value = saver.serde.dumps_typed(6)  # as a re-seal does
    assert next(iter(saver.list(config))).pending_writes == [("task", "n", 6)]
    stored.channel_versions["n"] = "2"  # no value stored at that version
    assert next(iter(saver.list(config))).checkpoint["channel_values"] == {}
