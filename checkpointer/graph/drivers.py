"""Perform the loop's I/O requests: with the saver's sync methods and a thread pool, or with
its async methods and the event loop.

This is the only place that touches the saver or calls nodes. Each task's writes are saved
the moment that task ends (not when the step ends), so a crash of a sibling loses nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from checkpointer.graph.effects import (
    ComputeWrites,
    Effect,
    Emit,
    GetTuple,
    HasChild,
    Hydrate,
    ListTuples,
    Program,
    Put,
    PutWrites,
    RunTasks,
)
from checkpointer.graph.spec import GraphSpec
from checkpointer.graph.tasks import (
    ExecTask,
    TaskOutcome,
    call_node_async,
    call_node_sync,
    writes_after_async,
    writes_after_sync,
)
from checkpointer.replay import achannels_from_checkpoint, channels_from_checkpoint
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.types import CheckpointTuple, RunnableConfig, checkpoint_id_of, make_config

T = TypeVar("T")

MAX_WORKERS = 64
"""Upper bound on the threads one superstep of sync nodes uses."""


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The last item a driver yields: the program's return value."""

    value: T


def storable_error(saver: BaseCheckpointSaver, error: Exception) -> Exception:
    """`error` if the saver's serializer can store and load it back, else a RuntimeError that
    names it: an error class the serializer refuses to load would make the checkpoint
    unreadable, and with it the resume."""
    try:
        saver.serde.loads_typed(saver.serde.dumps_typed(error))
    except Exception:
        return RuntimeError(f"{type(error).__module__}.{type(error).__qualname__}: {error}")
    return error


def _thread_of(tup: CheckpointTuple) -> RunnableConfig:
    configurable = tup.config["configurable"]
    return make_config(str(configurable["thread_id"]), configurable.get("checkpoint_ns", ""))


def _is_child(candidate: CheckpointTuple, parent_id: str | None) -> bool:
    parent = candidate.parent_config
    return parent is not None and checkpoint_id_of(parent) == parent_id


class SyncDriver:
    """Runs programs with the saver's sync API; nodes in a thread pool."""

    def __init__(self, graph: GraphSpec, saver: BaseCheckpointSaver) -> None:
        self.graph = graph
        self.saver = saver

    def drive(self, program: Program[T]) -> Iterator[Any]:
        """Yield every emitted chunk, then `Done(return value)`."""
        try:
            reply: Any = None
            while True:
                try:
                    effect = program.send(reply)
                except StopIteration as stop:
                    yield Done(stop.value)
                    return
                if isinstance(effect, Emit):
                    reply = None
                    yield effect.chunk
                else:
                    reply = self.perform(effect)
        finally:
            program.close()

    def result(self, program: Program[T]) -> T:
        """Run a program that emits nothing the caller wants; return its value."""
        for item in self.drive(program):
            if isinstance(item, Done):
                return cast(T, item.value)
        raise AssertionError("program ended without a result")

    def perform(self, effect: Effect) -> Any:
        saver = self.saver
        if isinstance(effect, GetTuple):
            return saver.get_tuple(effect.config)
        if isinstance(effect, Hydrate):
            return channels_from_checkpoint(
                self.graph.channels, effect.checkpoint, saver=saver, config=effect.config
            )
        if isinstance(effect, PutWrites):
            saver.put_writes(effect.config, effect.writes, effect.task_id, effect.task_path)
            return None
        if isinstance(effect, Put):
            return saver.put(effect.config, effect.checkpoint, effect.metadata, effect.new_versions)
        if isinstance(effect, RunTasks):
            return self.run_tasks(effect.tasks, effect.config)
        if isinstance(effect, ComputeWrites):
            return writes_after_sync(
                self.graph, effect.node, effect.update, effect.channels, effect.config
            )
        if isinstance(effect, ListTuples):
            return list(saver.list(effect.config, before=effect.before))
        if isinstance(effect, HasChild):
            return self.has_child(effect.tup)
        raise TypeError(f"unknown effect {effect!r}")

    def has_child(self, tup: CheckpointTuple) -> bool:
        thread = _thread_of(tup)
        target = checkpoint_id_of(tup.config)
        latest = self.saver.get_tuple(thread)
        if latest is None or checkpoint_id_of(latest.config) == target:
            return False
        listing = self.saver.list(thread)
        try:
            return any(_is_child(candidate, target) for candidate in listing)
        finally:
            close = getattr(listing, "close", None)
            if close is not None:
                close()

    def run_tasks(self, tasks: Sequence[ExecTask], config: RunnableConfig) -> list[TaskOutcome]:
        if len(tasks) == 1 and not tasks[0].node.is_async:
            outcome = call_node_sync(self.graph, tasks[0])
            self._save(outcome, config)
            return [outcome]
        by_id: dict[str, TaskOutcome] = {}
        workers = min(len(tasks), MAX_WORKERS)
        with ThreadPoolExecutor(workers, thread_name_prefix="checkpointer-node") as pool:
            futures = [pool.submit(call_node_sync, self.graph, task) for task in tasks]
            for future in as_completed(futures):
                outcome = future.result()
                self._save(outcome, config)
                by_id[outcome.task.id] = outcome
        return [by_id[task.id] for task in tasks]

    def _save(self, outcome: TaskOutcome, config: RunnableConfig) -> None:
        error = storable_error(self.saver, outcome.error) if outcome.error else None
        task = outcome.task
        self.saver.put_writes(config, outcome.stored_writes(error), task.id, task.path)


class AsyncDriver:
    """Runs programs with the saver's async API; async nodes gathered on the event loop,
    sync nodes in worker threads."""

    def __init__(self, graph: GraphSpec, saver: BaseCheckpointSaver) -> None:
        self.graph = graph
        self.saver = saver

    async def drive(self, program: Program[T]) -> AsyncIterator[Any]:
        """Yield every emitted chunk, then `Done(return value)`."""
        try:
            reply: Any = None
            while True:
                try:
                    effect = program.send(reply)
                except StopIteration as stop:
                    yield Done(stop.value)
                    return
                if isinstance(effect, Emit):
                    reply = None
                    yield effect.chunk
                else:
                    reply = await self.perform(effect)
        finally:
            program.close()

    async def result(self, program: Program[T]) -> T:
        async for item in self.drive(program):
            if isinstance(item, Done):
                return cast(T, item.value)
        raise AssertionError("program ended without a result")

    async def perform(self, effect: Effect) -> Any:
        saver = self.saver
        if isinstance(effect, GetTuple):
            return await saver.aget_tuple(effect.config)
        if isinstance(effect, Hydrate):
            return await achannels_from_checkpoint(
                self.graph.channels, effect.checkpoint, saver=saver, config=effect.config
            )
        if isinstance(effect, PutWrites):
            await saver.aput_writes(effect.config, effect.writes, effect.task_id, effect.task_path)
            return None
        if isinstance(effect, Put):
            return await saver.aput(
                effect.config, effect.checkpoint, effect.metadata, effect.new_versions
            )
        if isinstance(effect, RunTasks):
            return await self.run_tasks(effect.tasks, effect.config)
        if isinstance(effect, ComputeWrites):
            return await writes_after_async(
                self.graph, effect.node, effect.update, effect.channels, effect.config
            )
        if isinstance(effect, ListTuples):
            return [t async for t in saver.alist(effect.config, before=effect.before)]
        if isinstance(effect, HasChild):
            return await self.has_child(effect.tup)
        raise TypeError(f"unknown effect {effect!r}")

    async def has_child(self, tup: CheckpointTuple) -> bool:
        thread = _thread_of(tup)
        target = checkpoint_id_of(tup.config)
        latest = await self.saver.aget_tuple(thread)
        if latest is None or checkpoint_id_of(latest.config) == target:
            return False
        listing = self.saver.alist(thread)
        try:
            async for candidate in listing:
                if _is_child(candidate, target):
                    return True
            return False
        finally:
            aclose = getattr(listing, "aclose", None)
            if aclose is not None:
                await aclose()

    async def run_tasks(
        self, tasks: Sequence[ExecTask], config: RunnableConfig
    ) -> list[TaskOutcome]:
        async def run_one(task: ExecTask) -> TaskOutcome:
            outcome = await call_node_async(self.graph, task)
            error = storable_error(self.saver, outcome.error) if outcome.error else None
            await self.saver.aput_writes(config, outcome.stored_writes(error), task.id, task.path)
            return outcome

        return list(await asyncio.gather(*(run_one(task) for task in tasks)))
