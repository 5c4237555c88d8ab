"""Human-in-the-loop pauses raised from inside a node: `answer = interrupt(question)`.

The first time a node calls `interrupt`, the run stops and the question is saved as an
`__interrupt__` write of that task. `Command(resume=answer)` saves the answer as a
`__resume__` write and runs the task again; this time the same call returns the answer. A
node may ask several questions: the n-th call returns the n-th answer.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from checkpointer.graph.types import Interrupt


class GraphInterrupt(Exception):
    """Raised by `interrupt()` to stop the task; the runtime saves it, never re-raises it."""

    def __init__(self, interrupts: tuple[Interrupt, ...]) -> None:
        super().__init__(interrupts)
        self.interrupts = interrupts


@dataclass(slots=True)
class TaskScratchpad:
    """What `interrupt()` needs to know about the task it runs in."""

    task_id: str
    resume: list[Any] = field(default_factory=list)
    calls: int = 0


_CURRENT: ContextVar[TaskScratchpad | None] = ContextVar("checkpointer_graph_task", default=None)


def interrupt_id(task_id: str, index: int) -> str:
    """Stable id of the `index`-th interrupt of a task (same task id, same interrupt id)."""
    return hashlib.sha256(f"{task_id}:{index}".encode()).hexdigest()[:32]


def interrupt(value: Any) -> Any:
    """Pause the run and ask `value`; returns the answer given with `Command(resume=...)`."""
    scratch = _CURRENT.get()
    if scratch is None:
        raise RuntimeError("interrupt() can only be called inside a node of a running graph")
    index = scratch.calls
    scratch.calls += 1
    if index < len(scratch.resume):
        return scratch.resume[index]
    raise GraphInterrupt((Interrupt(value=value, id=interrupt_id(scratch.task_id, index)),))


def enter_task(scratch: TaskScratchpad) -> object:
    """Make `scratch` the current task's pad; returns the token for `leave_task`."""
    return _CURRENT.set(scratch)


def leave_task(token: object) -> None:
    _CURRENT.reset(token)  # type: ignore[arg-type]
