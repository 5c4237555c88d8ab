"""The I/O the runtime asks for, as values: one superstep loop for the sync and async APIs.

The loop (`checkpointer.graph.loop`) is written once as generators that *yield* these
requests and receive their results; `checkpointer.graph.drivers` performs them with the
saver's sync methods or its async ones. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from checkpointer.graph.spec import AnyChannel, NodeSpec
from checkpointer.graph.tasks import ExecTask
from checkpointer.types import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    RunnableConfig,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GetTuple:
    """-> CheckpointTuple | None"""

    config: RunnableConfig


@dataclass(frozen=True, slots=True)
class ListTuples:
    """-> list[CheckpointTuple], newest first"""

    config: RunnableConfig
    before: RunnableConfig | None = None


@dataclass(frozen=True, slots=True)
class HasChild:
    """-> bool: whether another checkpoint already has `tup` as its parent."""

    tup: CheckpointTuple


@dataclass(frozen=True, slots=True)
class Hydrate:
    """-> dict of channels holding the state of `checkpoint` (one delta-history call)."""

    checkpoint: Checkpoint
    config: RunnableConfig


@dataclass(frozen=True, slots=True)
class PutWrites:
    """-> None"""

    config: RunnableConfig
    writes: Sequence[tuple[str, Any]]
    task_id: str
    task_path: str


@dataclass(frozen=True, slots=True)
class Put:
    """-> RunnableConfig of the saved checkpoint"""

    config: RunnableConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: ChannelVersions


@dataclass(frozen=True, slots=True)
class RunTasks:
    """-> list[TaskOutcome] in task order; each outcome's writes saved on `config` as soon
    as that task ends."""

    tasks: Sequence[ExecTask]
    config: RunnableConfig


@dataclass(frozen=True, slots=True)
class ComputeWrites:
    """-> writes of `node` returning `update` (edges and branches included)."""

    node: NodeSpec
    update: Any
    channels: Mapping[str, AnyChannel]
    config: RunnableConfig


@dataclass(frozen=True, slots=True)
class Emit:
    """-> None: hand a chunk to the caller of `stream`."""

    chunk: Any


Effect = (
    GetTuple | ListTuples | HasChild | Hydrate | PutWrites | Put | RunTasks | ComputeWrites | Emit
)
Program = Generator[Effect, Any, T]
