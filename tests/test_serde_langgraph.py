"""Class loading through the LangGraph adapter: what a LangGraph app stores comes back
usable, with no configuration, and LangGraph's own allowlist entries resolve exactly."""

from __future__ import annotations

import dataclasses
import operator
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import msgpack
import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage
from langchain_core.messages.base import TextAccessor
from langgraph.checkpoint.memory import InMemorySaver as ReferenceSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Interrupt, Send

from checkpointer.errors import DeserializationError, TypeNotAllowedError
from checkpointer.langgraph import LangGraphSaver, _loaded_class, langgraph_serializer
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde import msgpack_serde as ms


class Answer(TypedDict, total=False):
    question: str
    answer: str
    log: Annotated[list[str], operator.add]


def _answer(state: Answer) -> dict[str, Any]:
    text = AIMessage(content=f"re: {state['question']}").text
    assert type(text) is TextAccessor
    return {"answer": text, "log": [text]}


def _text_graph(checkpointer: Any) -> Any:
    builder = StateGraph(Answer)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer)


@pytest.fixture(params=["memory", "sqlite"])
def lg_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return LangGraphSaver(InMemorySaver())
    saver = SqliteSaver(tmp_path / "t.db")
    saver.setup()
    return LangGraphSaver(saver)


def test_a_text_accessor_in_state_is_stored_and_reads_as_a_str(lg_saver: Any) -> None:
    """`AIMessage.text` returned into state (15.5): stored, and read back usable as a str,
    like LangGraph's savers give it (they store a plain str)."""
    config = {"configurable": {"thread_id": "t"}}
    ours = _text_graph(lg_saver)
    result = ours.invoke({"question": "why?", "log": []}, config)
    reference = _text_graph(ReferenceSaver()).invoke({"question": "why?", "log": []}, config)
    assert result == reference
    state = ours.get_state(config)
    assert state.values == {"question": "why?", "answer": "re: why?", "log": ["re: why?"]}
    answer = state.values["answer"]
    assert isinstance(answer, str) and answer.upper() == "RE: WHY?"
    assert [h.values.get("answer") for h in ours.get_state_history(config)] == [
        "re: why?",
        None,
        None,
    ]


def test_text_accessor_without_its_class_allowed_loads_as_str() -> None:
    text = AIMessage(content="hi").text
    data = MsgpackSerializer().dumps_typed({"a": text})
    loaded = MsgpackSerializer(strict=True).loads_typed(data)
    assert type(loaded["a"]) is str and loaded["a"] == "hi"
    kept = langgraph_serializer(MsgpackSerializer(strict=True)).loads_typed(data)
    assert type(kept["a"]) is TextAccessor  # langchain_core.messages is LangGraph's


def test_with_allowlist_resolves_entries_exactly_and_finds_local_classes() -> None:
    @dataclasses.dataclass
    class InnerObject:
        v: int

    strict = LangGraphSaver(InMemorySaver(serde=MsgpackSerializer(strict=True)))
    data = strict.serde.dumps_typed(InnerObject(1))  # this process wrote one
    with pytest.raises(TypeNotAllowedError):
        strict.serde.loads_typed(data)
    allowed = strict.with_allowlist({(__name__, "InnerObject"), ("subprocess", "Popen")})
    assert allowed.serde.loads_typed(data) == InnerObject(1)
    assert allowed.saver.serde is allowed.serde
    assert InnerObject in allowed.serde.allowed_types  # type: ignore[attr-defined]
    # An entry naming a class its module merely imported is not that module's class.
    assert _loaded_class(("tests.test_serde_langgraph", "TextAccessor")) is None
    assert _loaded_class(("langchain_core.messages.base", "TextAccessor")) is TextAccessor
    assert "not_imported_module_xyz" not in sys.modules
    assert _loaded_class(("not_imported_module_xyz", "Y")) is None
    assert "not_imported_module_xyz" not in sys.modules


def test_with_allowlist_ignores_malformed_entries() -> None:
    saver = LangGraphSaver(InMemorySaver())
    assert saver.with_allowlist({("only_one",), (1, 2)}) is saver  # type: ignore[arg-type]


def test_langgraph_modules_do_not_reach_what_they_import() -> None:
    """langgraph.types imports many things; only its own classes are reachable."""
    serde = langgraph_serializer(MsgpackSerializer(strict=True))
    crafted = ("msgpack", msgpack.packb([msgpack.ExtType(33, b""), "langgraph.types", "Any", {}]))
    with pytest.raises(TypeNotAllowedError):
        serde.loads_typed(crafted)
    crafted = (
        "msgpack",
        msgpack.packb([msgpack.ExtType(ms.EXT_DATACLASS, b""), "langgraph.types", "sys", {}]),
    )
    with pytest.raises(TypeNotAllowedError):
        serde.loads_typed(crafted)


@pytest.mark.parametrize(
    ("codec", "payload"),
    [
        ("langgraph.Send", ["node"]),
        ("langgraph.Send", [1, {}, None]),
        ("langgraph.Send", ["node", {}, "soon"]),
        ("langgraph.Send", "node"),
        ("langgraph.Interrupt", [1, 2, 3]),
        ("langgraph.Interrupt", ["v", "id", "schema"]),
        ("langgraph.Interrupt", ["v"]),
    ],
)
def test_langgraph_codecs_take_plain_data_only(codec: str, payload: Any) -> None:
    data = ("msgpack", msgpack.packb([msgpack.ExtType(ms.EXT_CODEC, b""), codec, payload]))
    with pytest.raises(DeserializationError, match="malformed"):
        langgraph_serializer().loads_typed(data)


def test_langgraph_codecs_round_trip() -> None:
    serde = langgraph_serializer()
    for value in (
        Send("n", {"x": (1, 2)}),
        Send("n", 1, timeout=2.5),
        Interrupt(value={"q": 1}, id="i"),
        Interrupt(value=1, id="j", response_schema={"type": "string"}),
    ):
        loaded = serde.loads_typed(serde.dumps_typed(value))
        assert type(loaded) is type(value) and loaded == value


def test_a_graph_with_app_classes_reads_back_on_a_fresh_serializer(tmp_path: Path) -> None:
    """Within one process too: a new saver over the same file reads the app's classes."""
    from tests.lg_restart_app import START_STATE, Note, Priority, Profile, build

    db = tmp_path / f"{uuid.uuid4().hex}.db"
    saver = SqliteSaver(db)
    saver.setup()
    build(LangGraphSaver(saver)).invoke(dict(START_STATE), {"configurable": {"thread_id": "a"}})
    fresh = SqliteSaver(db)
    state = build(LangGraphSaver(fresh)).get_state({"configurable": {"thread_id": "a"}})
    assert state.values["profile"] == Profile(name="ada", age=37)
    assert state.values["priority"] is Priority.HIGH
    assert state.values["notes"] == [Note("planned", ("a", "b")), Note("checked")]
