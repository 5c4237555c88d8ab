"""Tasks of a superstep: which nodes a checkpoint triggers, and a node call turned into writes.

A task's writes are everything the step needs from it: its state update, the trigger writes
of its outgoing edges, and the targets its conditional edges chose. Conditional edges are
evaluated inside the task, on the task's own view of the state, so the routing is saved with
the writes and a resumed run never re-evaluates it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections import defaultdict
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpointer.channels import BaseChannel
from checkpointer.errors import InvalidUpdateError
from checkpointer.graph.constants import END, NO_WRITES, trigger_channel
from checkpointer.graph.interrupts import GraphInterrupt, TaskScratchpad, enter_task, leave_task
from checkpointer.graph.spec import BranchSpec, GraphSpec, NodeSpec
from checkpointer.graph.types import Interrupt
from checkpointer.ids import channel_version_counter, task_id_for
from checkpointer.replay import CONTROL_CHANNELS
from checkpointer.types import ERROR, INTERRUPT, RESUME, ChannelVersion, Checkpoint, RunnableConfig

AnyChannel = BaseChannel[Any, Any, Any]
Writes = list[tuple[str, Any]]

SPECIAL_CHANNELS = frozenset({ERROR, INTERRUPT, RESUME})


@dataclass(slots=True)
class ExecTask:
    """One node to run in a superstep (also what `apply_writes` reads: name, path, triggers,
    writes)."""

    id: str
    name: str
    path: str
    triggers: tuple[str, ...]
    node: NodeSpec
    config: RunnableConfig
    writes: Writes = field(default_factory=list)
    resume: list[Any] = field(default_factory=list)
    done: bool = False
    """Its writes came from storage: it finished before a crash or an interrupt."""
    input: Any = None
    channels: Mapping[str, AnyChannel] = field(default_factory=dict)


@dataclass(slots=True)
class TaskOutcome:
    """How a task ended: its writes, the error it raised, or the interrupts it asked."""

    task: ExecTask
    writes: Writes | None = None
    error: Exception | None = None
    interrupts: tuple[Interrupt, ...] = ()

    def stored_writes(self, storable_error: Any = None) -> Writes:
        """What `put_writes` saves for this outcome (never empty: a finished task with no
        writes leaves a marker, or a resume would run it again)."""
        if self.error is not None:
            return [(ERROR, self.error if storable_error is None else storable_error)]
        if self.interrupts:
            return [(INTERRUPT, [i.to_dict() for i in self.interrupts])]
        return list(self.writes or ()) or [(NO_WRITES, None)]


# ------------------------------------------------------------------ scheduling
def version_key(version: ChannelVersion | None) -> tuple[int, str]:
    """Order of channel versions: the counter first, the string for equal counters."""
    return (channel_version_counter(version), "" if version is None else str(version))


def prepare_tasks(
    graph: GraphSpec,
    checkpoint: Checkpoint,
    channels: Mapping[str, AnyChannel],
    step: int,
    parent_id: str,
    config: RunnableConfig,
) -> list[ExecTask]:
    """The tasks `checkpoint` triggers, in path order, with ids that are the same every time
    this checkpoint is read (so saved writes are found again) and differ on any other."""
    versions = checkpoint["channel_versions"]
    ns = str(config.get("configurable", {}).get("checkpoint_ns", ""))
    tasks: list[ExecTask] = []
    for name in sorted(graph.nodes):
        node = graph.nodes[name]
        seen = checkpoint["versions_seen"].get(name, {})
        fired = tuple(
            ch
            for ch in node.triggers
            if channels[ch].is_available()
            and version_key(versions.get(ch)) > version_key(seen.get(ch))
        )
        if fired:
            tasks.append(
                ExecTask(
                    id=task_id_for(step, ns, parent_id, name),
                    name=name,
                    path=name,
                    triggers=fired,
                    node=node,
                    config=config,
                )
            )
    return tasks


def group_writes(pending: Iterable[tuple[str, str, Any]]) -> dict[str, Writes]:
    """Pending writes by task id, each task's in stored order."""
    out: dict[str, Writes] = defaultdict(list)
    for task_id, channel, value in pending:
        out[task_id].append((channel, value))
    return out


def finished_writes(writes: Sequence[tuple[str, Any]]) -> Writes | None:
    """A task's saved result, or None if it never finished (only errors/interrupts/resumes)."""
    if any(channel not in SPECIAL_CHANNELS for channel, _ in writes):
        return [(ch, v) for ch, v in writes if ch not in SPECIAL_CHANNELS]
    return None


def last_value(writes: Sequence[tuple[str, Any]], channel: str) -> Any:
    """The last value written to `channel` (None if none)."""
    found = None
    for ch, value in writes:
        if ch == channel:
            found = value
    return found


def update_of(graph: GraphSpec, writes: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    """The state update a task's writes carry (what `stream` shows for it)."""
    update = {
        ch: value
        for ch, value in writes
        if ch in graph.schema.channels and ch not in CONTROL_CHANNELS
    }
    return update or None


# ---------------------------------------------------------------- node input
def state_values(graph: GraphSpec, channels: Mapping[str, AnyChannel]) -> dict[str, Any]:
    """The readable state keys, as a plain dict."""
    return {k: channels[k].get() for k in graph.state_keys if channels[k].is_available()}


def node_input(graph: GraphSpec, channels: Mapping[str, AnyChannel]) -> Any:
    """What a node receives: the state dict, or an instance of a dataclass/pydantic schema."""
    values = state_values(graph, channels)
    schema = graph.state_schema
    if isinstance(schema, type) and (
        dataclasses.is_dataclass(schema) or hasattr(schema, "model_fields")
    ):
        return schema(**values)
    return values


def input_to_update(graph: GraphSpec, value: Any) -> dict[str, Any]:
    """A run's input as a state update: a dict, or an instance of the state schema."""
    if isinstance(value, Mapping):
        return dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dict(dump())
    raise InvalidUpdateError(
        f"Graph input must be a dict of state keys, got {type(value).__name__}: {value!r}"
    )


def update_to_writes(graph: GraphSpec, node: str, update: Any) -> Writes:
    """A node's returned update as channel writes; unknown keys are an error naming them."""
    if update is None:
        return []
    if not isinstance(update, Mapping):
        raise InvalidUpdateError(
            f"Node {node!r} must return a dict of state updates or None, "
            f"got {type(update).__name__}: {update!r}"
        )
    unknown = [key for key in update if key not in graph.schema.channels]
    if unknown:
        raise InvalidUpdateError(
            f"Node {node!r} returned key(s) {unknown} that are not in the state schema "
            f"(keys: {sorted(graph.schema.channels)})"
        )
    return [(str(key), value) for key, value in update.items()]


def _fresh_channels(
    channels: Mapping[str, AnyChannel], writes: Sequence[tuple[str, Any]]
) -> dict[str, AnyChannel]:
    """The step-start channels with one task's own writes applied: what its branches see."""
    grouped: dict[str, list[Any]] = defaultdict(list)
    for channel, value in writes:
        grouped[channel].append(value)
    local = dict(channels)
    for channel, values in grouped.items():
        copy = channels[channel].copy()
        copy.update(values)
        local[channel] = copy
    return local


def _branch_writes(graph: GraphSpec, branch: BranchSpec, result: Any) -> Writes:
    """Trigger writes for the node(s) a path function chose."""
    chosen = list(result) if isinstance(result, list | tuple | set | frozenset) else [result]
    writes: Writes = []
    for key in chosen:
        target = key
        if branch.path_map is not None:
            if key not in branch.path_map:
                raise InvalidUpdateError(
                    f"Conditional edge from {branch.source!r} returned {key!r}, which is not "
                    f"in its path_map {sorted(map(str, branch.path_map))}"
                )
            target = branch.path_map[key]
        if target == END:
            continue
        if target not in graph.nodes:
            raise InvalidUpdateError(
                f"Conditional edge from {branch.source!r} chose {target!r}, which is not a node "
                f"(nodes: {sorted(graph.nodes)})"
            )
        writes.append((trigger_channel(target), None))
    return writes


def _branch_args(
    graph: GraphSpec, branch: BranchSpec, channels: Mapping[str, AnyChannel], config: RunnableConfig
) -> tuple[Any, ...]:
    state = node_input(graph, channels)
    return (state, config) if branch.takes_config else (state,)


def writes_after_sync(
    graph: GraphSpec,
    node: NodeSpec,
    update: Any,
    channels: Mapping[str, AnyChannel],
    config: RunnableConfig,
) -> Writes:
    """All writes of a node that returned `update`: state, edges, chosen branches."""
    writes = update_to_writes(graph, node.name, update)
    out = [*writes, *node.edge_writes]
    if node.branches:
        fresh = _fresh_channels(channels, writes)
        for branch in node.branches:
            result = branch.path(*_branch_args(graph, branch, fresh, config))
            if inspect.isawaitable(result):
                result = run_awaitable(result)
            out.extend(_branch_writes(graph, branch, result))
    return out


async def writes_after_async(
    graph: GraphSpec,
    node: NodeSpec,
    update: Any,
    channels: Mapping[str, AnyChannel],
    config: RunnableConfig,
) -> Writes:
    """`writes_after_sync` for the async runtime: async path functions are awaited."""
    writes = update_to_writes(graph, node.name, update)
    out = [*writes, *node.edge_writes]
    if node.branches:
        fresh = _fresh_channels(channels, writes)
        for branch in node.branches:
            result = branch.path(*_branch_args(graph, branch, fresh, config))
            if inspect.isawaitable(result):
                result = await result
            out.extend(_branch_writes(graph, branch, result))
    return out


def run_awaitable(awaitable: Awaitable[Any]) -> Any:
    """Run an async node or path function from the sync runtime (in a worker thread)."""

    async def wait() -> Any:
        return await awaitable

    return asyncio.run(wait())


# ------------------------------------------------------------------ execution
def _node_args(task: ExecTask) -> tuple[Any, ...]:
    return (task.input, task.config) if task.node.takes_config else (task.input,)


def call_node_sync(graph: GraphSpec, task: ExecTask) -> TaskOutcome:
    """Run one task in this thread; errors and interrupts are returned, not raised."""
    assert task.node.fn is not None
    token = enter_task(TaskScratchpad(task.id, list(task.resume)))
    try:
        update = task.node.fn(*_node_args(task))
        if inspect.isawaitable(update):
            update = run_awaitable(update)
        writes = writes_after_sync(graph, task.node, update, task.channels, task.config)
    except GraphInterrupt as exc:
        return TaskOutcome(task, interrupts=exc.interrupts)
    except Exception as exc:
        return TaskOutcome(task, error=exc)
    finally:
        leave_task(token)
    return TaskOutcome(task, writes=writes)


async def call_node_async(graph: GraphSpec, task: ExecTask) -> TaskOutcome:
    """Run one task on the event loop (async nodes) or in a worker thread (sync nodes)."""
    if not task.node.is_async:
        return await asyncio.to_thread(call_node_sync, graph, task)
    assert task.node.fn is not None
    token = enter_task(TaskScratchpad(task.id, list(task.resume)))
    try:
        update = await task.node.fn(*_node_args(task))
        writes = await writes_after_async(graph, task.node, update, task.channels, task.config)
    except GraphInterrupt as exc:
        return TaskOutcome(task, interrupts=exc.interrupts)
    except Exception as exc:
        return TaskOutcome(task, error=exc)
    finally:
        leave_task(token)
    return TaskOutcome(task, writes=writes)
