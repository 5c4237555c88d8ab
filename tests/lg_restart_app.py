"""A LangGraph application whose state holds its own classes, for the restart tests.

`tests/test_serde_restart.py` runs this module in fresh interpreters: one writes threads
(`write`), another, started afterwards, reads and resumes them (`read`) with no allowlist
configured anywhere. It is imported either as `tests.lg_restart_app` or, as LangGraph's
Agent Server loads graph files, from its path under a made-up name (`__src__agent__graph`).

Run as a script: `python tests/lg_restart_app.py write|read DB_PATH [--module-name NAME]`;
prints one JSON line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import operator
import os
import sys
from typing import Annotated, Any, NamedTuple, TypedDict

import pydantic
from langchain_core.messages import AIMessage

FAIL_ENV = "LG_RESTART_APP_FAIL"


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Point(NamedTuple):
    x: int
    y: int


@dataclasses.dataclass
class Note:
    text: str
    tags: tuple[str, ...] = ()


class Profile(pydantic.BaseModel):
    name: str
    age: int


class State(TypedDict, total=False):
    profile: Profile
    notes: Annotated[list[Note], operator.add]
    priority: Priority
    where: Point
    answer: str
    checked: int


def plan(state: State) -> dict[str, Any]:
    return {"notes": [Note("planned", ("a", "b"))], "priority": Priority.HIGH, "where": Point(1, 2)}


def validate(state: State) -> dict[str, Any]:
    if os.environ.get(FAIL_ENV) == "validation":
        Profile(name="x", age="not a number")  # type: ignore[arg-type]
    profile = state["profile"]
    # `.text` is langchain-core's TextAccessor, a str subclass (issue 15.5).
    answer = AIMessage(content=f"hello {profile.name}").text
    return {"profile": Profile(name=profile.name, age=profile.age + 1), "answer": answer}


def check(state: State) -> dict[str, Any]:
    if os.environ.get(FAIL_ENV) == "cancel":
        raise asyncio.CancelledError("stop")
    return {"checked": 1, "notes": [Note("checked")]}


def build(checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("validate", validate)
    builder.add_node("check", check)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "validate")
    builder.add_edge("plan", "check")
    builder.add_edge("validate", END)
    builder.add_edge("check", END)
    return builder.compile(checkpointer=checkpointer)


# ----------------------------------------------------------------------- the driver


def _saver(db: str) -> Any:
    from checkpointer.langgraph import LangGraphSaver
    from checkpointer.savers.sqlite import SqliteSaver

    saver = SqliteSaver(db)
    saver.setup()
    return LangGraphSaver(saver)


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


THREADS = {"ok": None, "validation": "validation", "cancel": "cancel"}
START_STATE: dict[str, Any] = {"profile": Profile(name="ada", age=36), "notes": []}


def write(graph: Any) -> dict[str, Any]:
    raised = {}
    for thread, failure in THREADS.items():
        if failure is None:
            os.environ.pop(FAIL_ENV, None)
        else:
            os.environ[FAIL_ENV] = failure
        try:
            graph.invoke(dict(START_STATE), _config(thread))
        except BaseException as exc:  # the failing threads raise; their error is stored
            raised[thread] = type(exc).__name__
    os.environ.pop(FAIL_ENV, None)
    return {"raised": raised}


def _describe(value: Any) -> Any:
    """Values as JSON, with each object's class, so the parent can check types."""
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {k: _describe(v) for k, v in value.items()}
    if type(value) in (str, int, float, bool) or value is None:
        return {"type": type(value).__name__, "value": value}
    return {"type": type(value).__name__, "module": type(value).__module__, "repr": repr(value)}


def _error_text(error: Any) -> str | None:
    return None if error is None else (error if isinstance(error, str) else repr(error))


def read(graph: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for thread in THREADS:
        config = _config(thread)
        state = graph.get_state(config)
        history = list(graph.get_state_history(config))
        entry: dict[str, Any] = {
            "values": _describe(state.values),
            "next": list(state.next),
            "errors": {t.name: _error_text(t.error) for t in state.tasks if t.error},
            "history": len(history),
            "history_values": [_describe(h.values) for h in history],
        }
        if state.next:
            final = graph.invoke(None, config)  # resume: the failed task runs again
            entry["resumed"] = _describe(final)
            entry["after_resume_next"] = list(graph.get_state(config).next)
        out[thread] = entry
    return out


def _load_app(name: str | None) -> Any:
    """This module, imported the usual way or from its file under `name`."""
    if name is None:
        import tests.lg_restart_app as app

        return app
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.abspath(__file__))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> None:
    command, db = argv[0], argv[1]
    name = argv[argv.index("--module-name") + 1] if "--module-name" in argv else None
    app = _load_app(name)
    graph = app.build(_saver(db))
    result = app.write(graph) if command == "write" else app.read(graph)
    result["module"] = app.__name__
    print(json.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main(sys.argv[1:])
