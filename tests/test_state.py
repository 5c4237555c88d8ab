"""State schemas -> channels (seed 001: StateGraph._add_schema / _get_channels)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, NotRequired, TypedDict

import pydantic
import pytest

from checkpointer.channels import (
    MISSING,
    BaseChannel,
    BinaryOperatorAggregate,
    DeltaChannel,
    EphemeralValue,
    LastValue,
    Topic,
    UntrackedValue,
)
from checkpointer.state import (
    ROOT_KEY,
    SchemaChannels,
    channel_for_field,
    channels_from_schema,
    field_defaults,
    merge_channels,
    merge_schemas,
    schema_keys,
)


def extend(state: list[Any], writes: Sequence[list[Any]]) -> list[Any]:
    return state + [x for w in writes for x in w]


def merge_dicts(state: dict[str, int], writes: Sequence[dict[str, int]]) -> dict[str, int]:
    out = dict(state)
    for w in writes:
        out.update(w)
    return out


def concat(a: list[str], b: list[str]) -> list[str]:
    return a + b


SHARED_TOPIC = Topic(str, accumulate=True)


class TravelState(TypedDict):
    user_request: str
    research_notes: Annotated[list[str], operator.add]
    events: Annotated[list[str], SHARED_TOPIC]
    messages: Annotated[list[dict[str, Any]], DeltaChannel(extend, snapshot_frequency=7)]
    scores: NotRequired[Annotated[dict[str, int], DeltaChannel(merge_dicts)]]
    trigger: Annotated[int, EphemeralValue]
    client: Annotated[object, UntrackedValue(object, guard=False), "doc"]


class InputOnly(TypedDict):
    user_request: str
    research_notes: list[str]  # plain here: must not replace the reducer


class ConflictingInput(TypedDict):
    research_notes: Annotated[list[str], concat]


class PlainState(TypedDict):
    research_notes: list[str]


class ReducerInput(TypedDict):
    research_notes: Annotated[list[str], operator.add]


@dataclass
class DataState:
    query: str
    hits: Annotated[list[int], operator.add] = field(default_factory=list)
    limit: int = 10
    registry: ClassVar[dict[str, int]] = {}


class ModelState(pydantic.BaseModel):
    name: str
    tags: Annotated[list[str], operator.add] = []
    log: Annotated[list[str], DeltaChannel(extend)] = pydantic.Field(default_factory=list)


def test_typed_dict_fields_map_to_channels() -> None:
    channels = channels_from_schema(TravelState)
    assert list(channels) == [
        "user_request",
        "research_notes",
        "events",
        "messages",
        "scores",
        "trigger",
        "client",
    ]
    assert all(channels[key].key == key for key in channels)
    assert type(channels["user_request"]) is LastValue
    assert channels["user_request"].typ is str

    notes = channels["research_notes"]
    assert isinstance(notes, BinaryOperatorAggregate)
    assert notes.operator is operator.add
    assert notes.get() == []  # started from list()
    notes.update([["a"], ["b"]])
    assert notes.get() == ["a", "b"]

    assert isinstance(channels["trigger"], EphemeralValue)
    assert channels["trigger"].typ is int
    client = channels["client"]
    assert isinstance(client, UntrackedValue) and client.guard is False


def test_channel_instances_are_copied_not_shared() -> None:
    first = channels_from_schema(TravelState)["events"]
    second = channels_from_schema(TravelState)["events"]
    assert isinstance(first, Topic) and first.accumulate is True
    assert first is not SHARED_TOPIC and first is not second
    first.update(["x"])
    assert not second.is_available() and not SHARED_TOPIC.is_available()
    assert SHARED_TOPIC.key == ""  # the annotation's instance was not renamed either


def test_delta_channel_takes_its_type_from_the_annotation() -> None:
    channels = channels_from_schema(TravelState)
    messages, scores = channels["messages"], channels["scores"]
    assert isinstance(messages, DeltaChannel) and isinstance(scores, DeltaChannel)
    assert messages.typ is list and messages.snapshot_frequency == 7
    assert messages.reducer is extend
    assert scores.typ is dict  # through NotRequired[Annotated[dict[...], ...]]
    hydrated = scores.from_checkpoint(MISSING)
    assert hydrated.get() == {}
    hydrated.update([{"a": 1}, {"a": 2, "b": 3}])
    assert hydrated.get() == {"a": 2, "b": 3}
    assert scores.key == "scores"


def test_dataclass_schema() -> None:
    channels = channels_from_schema(DataState)
    assert list(channels) == ["query", "hits", "limit"]  # ClassVar is not state
    assert isinstance(channels["hits"], BinaryOperatorAggregate)
    assert type(channels["limit"]) is LastValue
    assert field_defaults(DataState) == {"hits": [], "limit": 10}
    # Factories are called per call: defaults are never shared between runs.
    assert field_defaults(DataState)["hits"] is not field_defaults(DataState)["hits"]


def test_pydantic_schema() -> None:
    channels = channels_from_schema(ModelState)
    assert list(channels) == ["name", "tags", "log"]
    assert isinstance(channels["tags"], BinaryOperatorAggregate)
    assert isinstance(channels["log"], DeltaChannel) and channels["log"].typ is list
    assert field_defaults(ModelState) == {"tags": [], "log": []}
    assert "model_config" not in channels


def test_bare_type_schema_has_a_root_key() -> None:
    channels = channels_from_schema(Annotated[list[int], operator.add])
    assert list(channels) == [ROOT_KEY]
    assert isinstance(channels[ROOT_KEY], BinaryOperatorAggregate)
    assert channels[ROOT_KEY].key == ROOT_KEY


def test_reducer_signature_is_checked() -> None:
    def three(a: int, b: int, c: int) -> int:
        return a + b + c

    def with_default(a: int, b: int, c: int = 0) -> int:
        return a + b + c

    with pytest.raises(ValueError, match="'total'"):
        channel_for_field("total", Annotated[int, three])
    assert isinstance(
        channel_for_field("total", Annotated[int, with_default]), BinaryOperatorAggregate
    )
    # Non-callable metadata (docs, constraints) leaves the key plain.
    assert type(channel_for_field("x", Annotated[int, "a doc string"])) is LastValue


def test_channel_class_that_needs_more_than_a_type_is_reported() -> None:
    with pytest.raises(ValueError, match="'total'"):
        channel_for_field("total", Annotated[int, BinaryOperatorAggregate])


def test_plain_key_in_input_schema_does_not_override_reducer() -> None:
    merged = SchemaChannels.from_schemas(TravelState, input_schema=InputOnly)
    assert isinstance(merged.channels["research_notes"], BinaryOperatorAggregate)
    assert merged.input_keys == ("user_request", "research_notes")
    assert merged.output_keys == merged.state_keys == tuple(schema_keys(TravelState))
    fresh = merged.fresh()
    fresh["research_notes"].update([["n"]])
    assert merged.channels["research_notes"].get() == []


def test_conflicting_declarations_name_the_key() -> None:
    with pytest.raises(ValueError, match="'research_notes'"):
        merge_schemas(TravelState, ConflictingInput)
    # A reducer declared where the state schema has a plain key is a conflict too.
    with pytest.raises(ValueError, match="'research_notes'"):
        SchemaChannels.from_schemas(PlainState, input_schema=ReducerInput)
    # The same reducer declared twice is fine.
    assert isinstance(
        merge_schemas(TravelState, ReducerInput)["research_notes"], BinaryOperatorAggregate
    )


def test_merge_channels_first_declaration_wins() -> None:
    channels: dict[str, BaseChannel] = {"a": BinaryOperatorAggregate(int, operator.add, key="a")}
    merged = merge_channels(channels, {"a": LastValue(int, "a"), "b": LastValue(str, "b")})
    assert merged is channels
    assert isinstance(channels["a"], BinaryOperatorAggregate)
    assert type(channels["b"]) is LastValue
    with pytest.raises(ValueError, match="'a'"):
        merge_channels(channels, {"a": BinaryOperatorAggregate(int, operator.mul, key="a")})
    with pytest.raises(ValueError, match="'b'"):
        merge_channels(channels, {"b": Topic(str, key="b")})
