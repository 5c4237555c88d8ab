"""State holding the app's own classes: a dataclass and a pydantic model. The server loads
this file as the module `__src__agent__graph`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel


@dataclass
class Note:
    text: str
    stars: int


class Profile(BaseModel):
    name: str
    tags: list[str]


class State(TypedDict, total=False):
    name: str
    note: Note
    profile: Profile


def write(state: State) -> dict[str, Any]:
    name = state.get("name", "anon")
    return {"note": Note(f"hello {name}", 5), "profile": Profile(name=name, tags=["a", "b"])}


def read(state: State) -> dict[str, Any]:
    note, profile = state["note"], state["profile"]
    assert isinstance(note, Note) and isinstance(profile, Profile), (note, profile)
    return {"note": Note(note.text + "!", note.stars + 1)}


builder = StateGraph(State)
builder.add_node("write", write)
builder.add_node("read", read)
builder.add_edge(START, "write")
builder.add_edge("write", "read")
builder.add_edge("read", END)
graph = builder.compile()
