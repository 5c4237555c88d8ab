"""The in-memory saver's fast paths give the answers of the general code they stand in for:
the delta history walk (which collects first and decodes once) equals the generic walk of
`BaseCheckpointSaver` over `get_tuple`, with plain and location-binding serializers; the
inlined id checks of `put`/`put_writes` refuse what `check_id` refuses; a batch made only of
special channels replaces, any other inserts if absent."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.errors import CheckpointerError, ConfigError
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.savers.memory import InMemorySaver
from checkpointer.serde.encryption import EncryptedSerializer
from checkpointer.serde.msgpack_serde import MsgpackSerializer
from checkpointer.types import (
    ERROR,
    INTERRUPT,
    MAX_ID_BYTES,
    RESUME,
    SCHEDULED,
    check_id,
    empty_checkpoint,
    make_config,
)

CHANNELS = ("a", "b", "c")
SPECIAL = (ERROR, SCHEDULED, INTERRUPT, RESUME)


def _encrypting() -> EncryptedSerializer:
    return EncryptedSerializer(MsgpackSerializer(), keys={"k": os.urandom(32)}, active_key_id="k")


write_values = st.one_of(st.none(), st.integers(-5, 5), st.lists(st.text(max_size=3), max_size=2))


@st.composite
def trees(draw: Any) -> list[dict[str, Any]]:
    """Checkpoints of one thread, each with a parent among the earlier ones (forks
    included), per channel a fresh version with or without a stored value (None counts),
    and the writes of a few tasks, some sent before their checkpoint is put."""
    count = draw(st.integers(min_value=1, max_value=10))
    steps = []
    for i in range(count):
        parent = None if i == 0 else draw(st.integers(min_value=0, max_value=i - 1))
        values = {
            ch: draw(write_values)
            for ch in CHANNELS
            if draw(st.integers(0, 3)) == 0  # most steps store nothing for a channel
        }
        tasks = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["", "~p, x", "~p, a"]),  # task path
                    st.sampled_from(["t1", "t2", "t0"]),  # task id
                    st.lists(
                        st.tuples(st.sampled_from(CHANNELS + SPECIAL[:1]), write_values),
                        max_size=3,
                    ),
                ),
                max_size=3,
            )
        )
        steps.append(
            {"parent": parent, "values": values, "tasks": tasks, "early": draw(st.booleans())}
        )
    return steps


def _build(saver: InMemorySaver, steps: list[dict[str, Any]]) -> list[str]:
    ids: list[str] = []
    for i, step in enumerate(steps):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"{i:04d}"
        version = f"{i + 1:08d}"
        checkpoint["channel_versions"] = {ch: version for ch in CHANNELS}
        checkpoint["channel_values"] = dict(step["values"])
        parent = None if step["parent"] is None else ids[step["parent"]]
        here = make_config("t", "", checkpoint["id"])

        def send(step: dict[str, Any] = step, here: Any = here) -> None:
            for path, task, writes in step["tasks"]:
                saver.put_writes(here, writes, task, path)

        if step["early"]:
            send()  # writes may arrive before their checkpoint
        counters = {ch: (1, 1) for ch in CHANNELS}
        saver.put(
            make_config("t", "", parent),
            checkpoint,
            {"source": "loop", "step": i, "parents": {}, "counters_since_delta_snapshot": counters},
            {ch: version for ch in CHANNELS},
        )
        if not step["early"]:
            send()
        ids.append(checkpoint["id"])
    return ids


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=trees(),
    target=st.integers(min_value=0, max_value=9),
    channels=st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=4),
    located=st.booleans(),
)
def test_delta_history_equals_the_generic_walk(
    steps: list[dict[str, Any]], target: int, channels: list[str], located: bool
) -> None:
    saver = InMemorySaver(serde=_encrypting()) if located else InMemorySaver()
    ids = _build(saver, steps)
    config = make_config("t", "", ids[min(target, len(ids) - 1)])
    fast = saver.get_delta_channel_history(config=config, channels=channels)
    generic = BaseCheckpointSaver.get_delta_channel_history(saver, config=config, channels=channels)
    assert fast == generic
    assert list(fast) == list(dict.fromkeys(channels))
    # The head (no checkpoint id) walks from the newest checkpoint, as get_tuple reads it.
    head = make_config("t", "")
    assert saver.get_delta_channel_history(config=head, channels=channels) == (
        BaseCheckpointSaver.get_delta_channel_history(saver, config=head, channels=channels)
    )


BAD_IDS = ["", "a\x00b", "x" * (MAX_ID_BYTES + 1), "é" * (MAX_ID_BYTES // 2 + 1), "\ud800", 7]


def _error_of(value: Any) -> type[Exception]:
    try:
        check_id(value, "id")
    except ConfigError as exc:
        return type(exc)
    raise AssertionError(f"check_id accepted {value!r}")


@pytest.mark.parametrize("bad", BAD_IDS)
def test_put_refuses_what_check_id_refuses(bad: Any) -> None:
    saver = InMemorySaver()
    checkpoint = empty_checkpoint()
    checkpoint["id"] = bad
    with pytest.raises(ConfigError) as caught:
        saver.put(make_config("t"), checkpoint, {"source": "input", "step": -1}, {})
    if bad != "":
        assert type(caught.value) is _error_of(bad)
    if isinstance(bad, str) and bad:  # a run id is checked when it is a string
        metadata = {"source": "input", "step": -1, "run_id": bad}
        with pytest.raises(ConfigError) as caught:
            saver.put(make_config("t"), empty_checkpoint(), metadata, {})
        assert type(caught.value) is _error_of(bad)
    assert list(saver.list(None)) == []  # nothing was stored


@pytest.mark.parametrize("bad", [b for b in BAD_IDS if b != ""])
@pytest.mark.parametrize("argument", ["task_id", "task_path"])
def test_put_writes_refuses_what_check_id_refuses(bad: Any, argument: str) -> None:
    saver = InMemorySaver()
    config = saver.put(make_config("t"), empty_checkpoint(), {"source": "input", "step": -1}, {})
    arguments = {"task_id": "task", "task_path": "", argument: bad}
    with pytest.raises(ConfigError) as caught:
        saver.put_writes(config, [("a", 1)], **arguments)
    assert type(caught.value) is _error_of(bad)
    tup = saver.get_tuple(config)
    assert tup is not None and tup.pending_writes == []


def test_put_writes_needs_a_checkpoint_id() -> None:
    with pytest.raises(CheckpointerError, match="checkpoint_id"):
        InMemorySaver().put_writes(make_config("t"), [("a", 1)], "task")


def test_special_batches_replace_others_insert_if_absent() -> None:
    saver = InMemorySaver()
    config = saver.put(make_config("t"), empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.put_writes(config, [("a", 1), (ERROR, "first")], "task")
    saver.put_writes(config, [("a", 2), (ERROR, "second")], "task")  # mixed: kept as it was
    saver.put_writes(config, [], "task")  # empty: changes nothing
    tup = saver.get_tuple(config)
    assert tup is not None
    assert sorted(tup.pending_writes, key=repr) == [("task", ERROR, "first"), ("task", "a", 1)]
    saver.put_writes(config, [(ERROR, "third"), (INTERRUPT, "stop")], "task")  # special only
    tup = saver.get_tuple(config)
    assert tup is not None
    assert sorted(tup.pending_writes, key=repr) == [
        ("task", ERROR, "third"),
        ("task", INTERRUPT, "stop"),
        ("task", "a", 1),
    ]


def test_put_result_and_stored_metadata_do_not_follow_the_callers_objects() -> None:
    saver = InMemorySaver()
    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"] = {"a": "1"}
    checkpoint["channel_values"] = {"a": [1]}
    metadata: dict[str, Any] = {"source": "input", "step": -1, "parents": {}, "tags": ["x"]}
    config = saver.put(make_config("t"), checkpoint, metadata, {"a": "1"})
    assert config == make_config("t", "", checkpoint["id"])
    metadata["tags"].append("y")
    metadata["parents"]["other"] = "z"
    checkpoint["channel_versions"]["a"] = "2"
    checkpoint["channel_values"]["a"].append(2)
    tup = saver.get_tuple(config)
    assert tup is not None
    assert tup.metadata["tags"] == ["x"] and tup.metadata["parents"] == {}
    assert tup.checkpoint["channel_versions"] == {"a": "1"}
    assert tup.checkpoint["channel_values"] == {"a": [1]}
    tup.metadata["tags"].append("mutated by a reader")
    again = saver.get_tuple(config)
    assert again is not None and again.metadata["tags"] == ["x"]


def test_filtered_list_hands_out_the_same_metadata_as_get_tuple_and_fresh_copies() -> None:
    saver = InMemorySaver()
    config = make_config("t")
    for step in range(3):
        metadata = {
            "source": "loop",
            "step": step,
            "user": "u",
            "counters_since_delta_snapshot": {"m": (step, 1)},
        }
        config = saver.put(config, empty_checkpoint(), metadata, {})
    found = list(saver.list(make_config("t"), filter={"user": "u", "step": 1}))
    assert len(found) == 1
    direct = saver.get_tuple(found[0].config)
    assert direct is not None and found[0].metadata == direct.metadata
    assert found[0].metadata["counters_since_delta_snapshot"] == {"m": (1, 1)}
    found[0].metadata["user"] = "changed by a reader"
    again = list(saver.list(make_config("t"), filter={"user": "u", "step": 1}))
    assert again[0].metadata["user"] == "u"
    assert list(saver.list(make_config("t"), filter={"user": "other"})) == []


batch_values = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=4),
    st.binary(max_size=3),
    st.lists(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), max_size=2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writes=st.lists(st.lists(batch_values, min_size=1, max_size=4), min_size=1, max_size=24),
    seed_at=st.one_of(st.none(), st.integers(min_value=0, max_value=23)),
    tagged=st.one_of(st.none(), st.integers(min_value=0, max_value=23)),
)
def test_delta_history_batch_equals_reading_each_write(
    writes: list[list[Any]], seed_at: int | None, tagged: int | None
) -> None:
    """A history's writes decoded in one batch (`plain_batch_loader`, used from 8 plain
    msgpack values on) give what reading each write gives: the generic walk over
    `get_tuple`, and the same walk with the batch turned off."""
    serde = MsgpackSerializer()
    saver = InMemorySaver(serde=serde)
    parent = None
    for i, batch in enumerate(writes):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"{i:04d}"
        checkpoint["channel_versions"] = {"a": f"{i + 1:08d}"}
        checkpoint["channel_values"] = {"a": ["seed", i]} if i == seed_at else {}
        parent = saver.put(
            make_config("t", "", parent["configurable"]["checkpoint_id"] if parent else None),
            checkpoint,
            {"source": "loop", "step": i, "parents": {}},
            {"a": checkpoint["channel_versions"]["a"]},
        )
        if i == tagged:  # a tuple is tagged: the batch refuses it, each write reads alone
            batch = [*batch, (i, "x")]
        saver.put_writes(parent, [("a", v) for v in batch], f"task{i % 3}")
    head = saver.put(parent, {**empty_checkpoint(), "id": "9999"}, {}, {})
    batched = saver.get_delta_channel_history(config=head, channels=["a"])
    generic = BaseCheckpointSaver.get_delta_channel_history(saver, config=head, channels=["a"])
    assert batched == generic
    serde.fast_batch_loader = lambda: lambda raws: None  # type: ignore[method-assign]
    assert saver.get_delta_channel_history(config=head, channels=["a"]) == batched


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


def _json_outcome(load: Any, text: Any) -> Any:
    try:
        return ("value", load(text))
    except Exception as exc:
        return ("error", type(exc), str(exc))


@settings(max_examples=300, deadline=None)
@given(
    value=json_values,
    before=st.sampled_from(["", " ", "\n", "\ufeff", "x", "[", "1", "{}"]),
    after=st.sampled_from(["", " ", "\n", "x", "]", ",1", "1", "{}"]),
    cut=st.integers(min_value=0, max_value=3),
    indent=st.sampled_from([None, 1]),
)
def test_loads_json_is_json_loads(
    value: Any, before: str, after: str, cut: int, indent: int | None
) -> None:
    """Metadata decoding through the C scanner returns what `json.loads` returns, and
    raises what it raises, on metadata text and on any text around or cut from it."""
    import json

    from checkpointer.savers.base import dumps_json
    from checkpointer.savers.memory_store import loads_json

    texts = [json.dumps(value, indent=indent), before + json.dumps(value) + after]
    with contextlib.suppress(Exception):  # what dumps_json refuses is never stored
        texts.append(dumps_json(value))
    texts += [t[: len(t) - cut] for t in texts]
    for text in texts:
        assert _json_outcome(loads_json, text) == _json_outcome(json.loads, text)
