"""What the runtime hands back to users: snapshots of state, tasks, interrupts, commands.

The shapes follow LangGraph's (`StateSnapshot`, `PregelTask`, `Interrupt`, `Command`) so code
written against it reads the same here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from checkpointer.types import CheckpointMetadata, RunnableConfig


@dataclass(frozen=True, slots=True)
class Interrupt:
    """A pause a node asked for with `interrupt(value)`; answer it with `Command(resume=...)`.

    `id` is stable for a given task and call position, so a resume map `{id: answer}` keeps
    addressing the same question when the node runs again.
    """

    value: Any
    id: str

    def to_dict(self) -> dict[str, Any]:
        """Plain form for storage: any serializer can load it without registering a class."""
        return {"value": self.value, "id": self.id}

    @classmethod
    def from_stored(cls, stored: Any) -> Interrupt:
        if isinstance(stored, Interrupt):
            return stored
        if isinstance(stored, Mapping):
            return cls(value=stored.get("value"), id=str(stored.get("id", "")))
        return cls(value=stored, id="")


@dataclass(frozen=True, slots=True)
class Command:
    """Input that resumes a paused run: `graph.invoke(Command(resume=answer), config)`.

    With several pending interrupts, pass `{interrupt_id: answer, ...}` as `resume`.
    """

    resume: Any = None


class StateTask(NamedTuple):
    """A task of the step that follows a checkpoint, and what is known of its outcome."""

    id: str
    name: str
    path: str
    error: BaseException | None = None
    interrupts: tuple[Interrupt, ...] = ()
    result: dict[str, Any] | None = None


class StateSnapshot(NamedTuple):
    """The state of a thread at one checkpoint, and what would run next from it."""

    values: dict[str, Any]
    next: tuple[str, ...]
    config: RunnableConfig
    metadata: CheckpointMetadata | None
    created_at: str | None
    parent_config: RunnableConfig | None
    tasks: tuple[StateTask, ...]
    interrupts: tuple[Interrupt, ...]


PregelTask = StateTask
"""LangGraph's name for `StateTask`."""
