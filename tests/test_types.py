"""Config helpers: clear errors for the mistakes users make most."""

from __future__ import annotations

import pytest

from checkpointer.errors import ConfigError
from checkpointer.types import (
    checkpoint_id_of,
    checkpoint_ns_of,
    copy_checkpoint,
    empty_checkpoint,
    is_special_batch,
    make_config,
    thread_id_of,
    write_idx,
)


def test_make_config_round_trips_through_accessors() -> None:
    config = make_config("t1", "ns", "c1")
    assert (thread_id_of(config), checkpoint_ns_of(config), checkpoint_id_of(config)) == (
        "t1",
        "ns",
        "c1",
    )
    latest = make_config("t1")
    assert checkpoint_id_of(latest) is None
    assert checkpoint_ns_of(latest) == ""


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "configurable'\\] is missing"),
        ({"configurable": {}}, "thread_id'\\] is required"),
        ({"configurable": {"thread_id": 1.5}}, "must be a string"),
        ("t1", "must be a dict"),
    ],
)
def test_thread_id_errors_name_the_problem(config: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        thread_id_of(config)  # type: ignore[arg-type]


def test_integer_thread_ids_are_accepted_as_strings() -> None:
    assert thread_id_of({"configurable": {"thread_id": 42}}) == "42"


def test_mistyped_checkpoint_fields_are_refused() -> None:
    with pytest.raises(ConfigError, match="checkpoint_id"):
        checkpoint_id_of({"configurable": {"thread_id": "t", "checkpoint_id": 5}})
    with pytest.raises(ConfigError, match="checkpoint_ns"):
        checkpoint_ns_of({"configurable": {"thread_id": "t", "checkpoint_ns": 5}})


def test_copy_checkpoint_is_independent() -> None:
    original = empty_checkpoint()
    original["versions_seen"]["node"] = {"a": "1"}
    copy = copy_checkpoint(original)
    copy["channel_values"]["x"] = 1
    copy["versions_seen"]["node"]["a"] = "2"
    assert original["channel_values"] == {}
    assert original["versions_seen"]["node"]["a"] == "1"


def test_special_channel_slots() -> None:
    assert write_idx("__error__", 0) == -1
    assert write_idx("__interrupt__", 3) == -3
    assert write_idx("messages", 3) == 3
    assert is_special_batch(["__error__"])
    assert not is_special_batch(["__error__", "messages"])
    assert not is_special_batch([])
