"""The state API: read a checkpoint as a `StateSnapshot`, or write to it as a node.

`update_state` saves like a superstep of one task: its writes are pending writes of the
addressed checkpoint (forked first if it already has a successor), then an `update`
checkpoint is saved on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpointer.errors import InvalidUpdateError
from checkpointer.graph.constants import START, UPDATE_PATH
from checkpointer.graph.effects import ComputeWrites, GetTuple, Hydrate, Program, PutWrites
from checkpointer.graph.persistence import (
    Cursor,
    Runtime,
    base_config,
    load_for_write,
    nodes_of,
    run_metadata,
    save,
)
from checkpointer.graph.spec import AnyChannel, GraphSpec
from checkpointer.graph.tasks import (
    Writes,
    finished_writes,
    group_writes,
    input_to_update,
    last_value,
    prepare_tasks,
    state_values,
    update_of,
)
from checkpointer.graph.types import Interrupt, StateSnapshot, StateTask
from checkpointer.ids import task_id_for
from checkpointer.replay import TaskWrites, apply_writes
from checkpointer.types import (
    ERROR,
    INTERRUPT,
    CheckpointTuple,
    RunnableConfig,
    checkpoint_ns_of,
)


def get_state(rt: Runtime, config: RunnableConfig) -> Program[StateSnapshot]:
    """The snapshot at the checkpoint `config` addresses (latest if none)."""
    tup: CheckpointTuple | None = yield GetTuple(config)
    if tup is None:
        return StateSnapshot({}, (), config, None, None, None, (), ())
    channels: dict[str, AnyChannel] = yield Hydrate(tup.checkpoint, tup.config)
    return snapshot_of(rt.graph, tup, channels)


def snapshot_of(
    graph: GraphSpec, tup: CheckpointTuple, channels: Mapping[str, AnyChannel]
) -> StateSnapshot:
    """A checkpoint and its hydrated channels as a `StateSnapshot`: values, the tasks that
    follow it and what is known of them (result, error, interrupts)."""
    step = int(tup.metadata.get("step", -1))
    tasks = prepare_tasks(
        graph, tup.checkpoint, channels, step + 1, tup.checkpoint["id"], tup.config
    )
    by_task = group_writes(tup.pending_writes or ())
    out: list[StateTask] = []
    for task in tasks:
        stored = by_task.get(task.id, [])
        done = finished_writes(stored)
        interrupts: tuple[Interrupt, ...] = ()
        error = None
        if done is None:
            error = last_value(stored, ERROR)
            interrupts = tuple(
                Interrupt.from_stored(i) for i in last_value(stored, INTERRUPT) or ()
            )
        out.append(
            StateTask(
                id=task.id,
                name=task.name,
                path=task.path,
                error=error if isinstance(error, BaseException) else None,
                interrupts=interrupts,
                result=update_of(graph, done) if done is not None else None,
            )
        )
    return StateSnapshot(
        values=state_values(graph, channels),
        next=tuple(t.name for t in out),
        config=tup.config,
        metadata=tup.metadata,
        created_at=tup.checkpoint["ts"],
        parent_config=tup.parent_config,
        tasks=tuple(out),
        interrupts=tuple(i for t in out for i in t.interrupts),
    )


def update_state(
    rt: Runtime, config: RunnableConfig, values: Any, as_node: str | None = None
) -> Program[RunnableConfig]:
    """Write `values` as if node `as_node` had returned them; save an `update` checkpoint.

    `as_node` defaults to the node that wrote the addressed checkpoint. Its edges fire as
    they would have, so the next step is the one that node leads to.
    """
    graph = rt.graph
    base = base_config(config)
    meta = run_metadata(config)
    cursor = yield from load_for_write(rt, config, meta)
    name = as_node if as_node is not None else _infer_as_node(cursor)
    if name != START and name not in graph.nodes:
        raise InvalidUpdateError(
            f"update_state: unknown node {name!r} (nodes: {sorted(graph.nodes)})"
        )
    update = None if values is None else input_to_update(graph, values)
    writes: Writes = yield ComputeWrites(graph.node(name), update, cursor.channels, config)
    task_id = ""
    if cursor.config is not None:
        task_id = task_id_for(
            cursor.step + 1, checkpoint_ns_of(config), cursor.checkpoint["id"], UPDATE_PATH, name
        )
        yield PutWrites(cursor.config, writes, task_id, UPDATE_PATH)
    task = TaskWrites(name=name, writes=writes, triggers=(INTERRUPT,), path=UPDATE_PATH)
    updated = apply_writes(
        cursor.checkpoint, cursor.channels, [task], rt.next_version, graph.trigger_to_nodes
    )
    yield from save(
        rt,
        cursor,
        base,
        meta,
        source="update",
        updated=updated,
        writes=[writes],
        applied={task_id},
        nodes=[name],
    )
    assert cursor.config is not None
    return cursor.config


def _infer_as_node(cursor: Cursor) -> str:
    if cursor.config is None:
        return START
    nodes = nodes_of(cursor.metadata)
    if len(nodes) == 1:
        return str(nodes[0])
    raise InvalidUpdateError(
        f"Ambiguous update: the checkpoint was written by {nodes or 'no node'}; "
        "pass as_node=... to say which node the update comes from"
    )
