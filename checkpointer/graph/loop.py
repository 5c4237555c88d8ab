"""The superstep loop, written once for the sync and the async runtime.

`run` is a generator that yields I/O requests (`effects`) and is driven by `drivers`.
Persistence order is what makes resuming safe:

1. every task's writes are saved (`put_writes` on the checkpoint the task read) as soon as
   that task ends, errors and interrupts included;
2. the step's checkpoint is saved after all its writes (`persistence.save`);
3. a resumed step re-runs only the tasks with no saved result: the others' writes are found
   under their deterministic task ids and applied as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Literal

from checkpointer.errors import InvalidUpdateError
from checkpointer.graph.constants import INPUT_PATH, START
from checkpointer.graph.effects import ComputeWrites, Emit, Program, PutWrites, RunTasks
from checkpointer.graph.errors import EmptyInputError, GraphRecursionError
from checkpointer.graph.persistence import (
    Cursor,
    InterruptNodes,
    Runtime,
    base_config,
    load_for_write,
    run_metadata,
    save,
)
from checkpointer.graph.spec import GraphSpec
from checkpointer.graph.tasks import (
    ExecTask,
    TaskOutcome,
    Writes,
    finished_writes,
    group_writes,
    input_to_update,
    last_value,
    node_input,
    prepare_tasks,
    state_values,
    update_of,
    version_key,
)
from checkpointer.graph.types import Command, Interrupt
from checkpointer.ids import task_id_for
from checkpointer.replay import TaskWrites, apply_writes
from checkpointer.types import INTERRUPT, RESUME, Checkpoint, RunnableConfig, checkpoint_ns_of

DEFAULT_RECURSION_LIMIT = 25
StreamMode = Literal["updates", "values"]


def recursion_limit(config: RunnableConfig) -> int:
    limit = config.get("recursion_limit", DEFAULT_RECURSION_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"config['recursion_limit'] must be a positive int, got {limit!r}")
    return limit


def should_interrupt(
    checkpoint: Checkpoint, nodes: InterruptNodes, tasks: Iterable[ExecTask]
) -> bool:
    """Pause if a listed node is about to run (or just ran) and the state moved since the
    last pause: a resumed run must not stop at the same place again."""
    seen = checkpoint["versions_seen"].get(INTERRUPT, {})
    moved = any(
        version_key(version) > version_key(seen.get(channel))
        for channel, version in checkpoint["channel_versions"].items()
    )
    return moved and any(nodes == "*" or task.name in nodes for task in tasks)


def run(
    rt: Runtime,
    input: Any,
    config: RunnableConfig,
    modes: Collection[StreamMode] = (),
) -> Program[dict[str, Any]]:
    """Run the graph from the checkpoint `config` addresses until nothing is triggered, an
    interrupt pauses it, or a node fails; returns the output state."""
    graph = rt.graph
    base = base_config(config)
    meta = run_metadata(config)
    limit = recursion_limit(config)
    resuming = input is None or isinstance(input, Command)
    cursor = yield from load_for_write(rt, config, meta)
    if cursor.config is None and resuming:
        if isinstance(input, Command):
            raise EmptyInputError("Command(resume=...) given, but the thread has no checkpoint")
        return {}
    if resuming:
        # Past the pause that stopped the last run: interrupt_before must not fire again.
        seen = cursor.checkpoint["versions_seen"].setdefault(INTERRUPT, {})
        seen.update(cursor.checkpoint["channel_versions"])
        if isinstance(input, Command):
            yield from _record_resume(rt, cursor, input, config)
    else:
        yield from _apply_input(rt, cursor, base, meta, input, config)
        if "values" in modes:
            yield Emit(("values", state_values(graph, cursor.channels)))

    asked: list[Interrupt] = []
    steps = 0
    while True:
        assert cursor.config is not None
        tasks = prepare_tasks(
            graph,
            cursor.checkpoint,
            cursor.channels,
            cursor.step + 1,
            cursor.checkpoint["id"],
            config,
        )
        if not tasks:
            break
        if rt.interrupt_before and should_interrupt(cursor.checkpoint, rt.interrupt_before, tasks):
            if "updates" in modes:
                yield Emit(("updates", {INTERRUPT: ()}))
            break
        if steps >= limit:
            raise GraphRecursionError(
                f"Recursion limit of {limit} reached without hitting a stop condition. You can "
                "increase the limit by setting the `recursion_limit` config key."
            )
        steps += 1
        todo = _reuse_saved_writes(graph, cursor, tasks)
        outcomes: list[TaskOutcome] = (yield RunTasks(todo, cursor.config)) if todo else []
        errors = [o.error for o in outcomes if o.error is not None]
        if errors:
            raise errors[0]
        for outcome in outcomes:
            if outcome.writes is not None:
                outcome.task.writes = outcome.writes
        asked = [i for o in outcomes for i in o.interrupts]
        if asked:
            if "updates" in modes:
                yield Emit(("updates", {INTERRUPT: tuple(asked)}))
            break
        updated = apply_writes(
            cursor.checkpoint, cursor.channels, tasks, rt.next_version, graph.trigger_to_nodes
        )
        yield from save(
            rt,
            cursor,
            base,
            meta,
            source="loop",
            updated=updated,
            writes=[t.writes for t in tasks],
            applied={t.id for t in tasks},
            nodes=[t.name for t in tasks],
        )
        if "updates" in modes:
            for task in tasks:
                yield Emit(("updates", {task.name: update_of(graph, task.writes)}))
        if "values" in modes:
            yield Emit(("values", state_values(graph, cursor.channels)))
        if rt.interrupt_after and should_interrupt(cursor.checkpoint, rt.interrupt_after, tasks):
            if "updates" in modes:
                yield Emit(("updates", {INTERRUPT: ()}))
            break

    output = {
        k: cursor.channels[k].get() for k in graph.output_keys if cursor.channels[k].is_available()
    }
    if asked:
        output[INTERRUPT] = asked
    return output


def _reuse_saved_writes(graph: GraphSpec, cursor: Cursor, tasks: list[ExecTask]) -> list[ExecTask]:
    """Give finished tasks their saved writes; return the tasks that still have to run."""
    saved = group_writes(cursor.pending)
    todo: list[ExecTask] = []
    for task in tasks:
        stored = saved.get(task.id, [])
        done = finished_writes(stored)
        if done is not None:
            task.writes, task.done = done, True
            continue
        task.resume = list(last_value(stored, RESUME) or [])
        task.input = node_input(graph, cursor.channels)
        task.channels = cursor.channels
        todo.append(task)
    return todo


def _apply_input(
    rt: Runtime,
    cursor: Cursor,
    base: RunnableConfig,
    meta: Mapping[str, Any],
    input: Any,
    config: RunnableConfig,
) -> Program[None]:
    """Apply a new input as the START task and save the `input` checkpoint.

    Tasks the parent checkpoint still had pending (a crashed or paused step) are discarded,
    as in LangGraph: a new input starts a new run.
    """
    graph = rt.graph
    writes: Writes = yield ComputeWrites(
        graph.start, input_to_update(graph, input), cursor.channels, config
    )
    discarded: list[ExecTask] = []
    task_id = ""
    if cursor.config is not None:
        parent_id = cursor.checkpoint["id"]
        discarded = prepare_tasks(
            graph, cursor.checkpoint, cursor.channels, cursor.step + 1, parent_id, config
        )
        task_id = task_id_for(cursor.step + 1, checkpoint_ns_of(config), parent_id, INPUT_PATH)
        yield PutWrites(cursor.config, writes, task_id, INPUT_PATH)
    task = TaskWrites(name=START, writes=writes, path=INPUT_PATH)
    updated = apply_writes(
        cursor.checkpoint,
        cursor.channels,
        [*discarded, task],
        rt.next_version,
        graph.trigger_to_nodes,
    )
    yield from save(
        rt,
        cursor,
        base,
        meta,
        source="input",
        updated=updated,
        writes=[writes],
        applied={task_id},
        nodes=[START],
    )


def _record_resume(
    rt: Runtime, cursor: Cursor, command: Command, config: RunnableConfig
) -> Program[None]:
    """Save the answer(s) of a `Command(resume=...)` as `__resume__` writes of the tasks
    that asked; they re-run and their `interrupt()` calls return the answers."""
    assert cursor.config is not None
    tasks = prepare_tasks(
        rt.graph,
        cursor.checkpoint,
        cursor.channels,
        cursor.step + 1,
        cursor.checkpoint["id"],
        config,
    )
    by_task = group_writes(cursor.pending)
    waiting: dict[str, ExecTask] = {}
    ids: dict[str, str] = {}
    for task in tasks:
        stored = by_task.get(task.id, [])
        if finished_writes(stored) is None and last_value(stored, INTERRUPT):
            waiting[task.id] = task
            for item in last_value(stored, INTERRUPT):
                ids[Interrupt.from_stored(item).id] = task.id
    if not waiting:
        raise EmptyInputError(
            "Command(resume=...) given, but no interrupt is waiting for an answer"
        )
    resume = command.resume
    if isinstance(resume, Mapping) and resume and all(k in ids for k in resume):
        answers = {ids[k]: v for k, v in resume.items()}
    elif len(waiting) == 1:
        answers = {next(iter(waiting)): resume}
    else:
        raise InvalidUpdateError(
            f"{len(waiting)} interrupts are waiting; resume with a dict "
            f"{{interrupt_id: answer}} naming them: {sorted(ids)}"
        )
    for task_id, answer in answers.items():
        values = [*(last_value(by_task.get(task_id, []), RESUME) or []), answer]
        task = waiting[task_id]
        yield PutWrites(cursor.config, [(RESUME, values)], task_id, task.path)
        cursor.pending = [w for w in cursor.pending if not (w[0] == task_id and w[1] == RESUME)]
        cursor.pending.append((task_id, RESUME, values))
