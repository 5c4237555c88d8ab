"""`CompiledStateGraph`: the public run and state API of a compiled graph.

Every method builds a program from `loop` / `history` and hands it to the sync or the async
driver; this module only shapes inputs and outputs.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Literal

import checkpointer.graph.guard as guard
import checkpointer.graph.history as history_mod
import checkpointer.graph.loop as loop
import checkpointer.graph.state_api as state_api
from checkpointer.errors import ConfigError
from checkpointer.graph.drivers import AsyncDriver, Done, SyncDriver
from checkpointer.graph.effects import Program
from checkpointer.graph.loop import StreamMode
from checkpointer.graph.persistence import InterruptNodes, Runtime
from checkpointer.graph.spec import GraphSpec
from checkpointer.graph.types import StateSnapshot
from checkpointer.ids import next_channel_version
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.savers.memory import InMemorySaver
from checkpointer.types import RunnableConfig, thread_id_of

StreamModeArg = StreamMode | Sequence[StreamMode]


def _modes(stream_mode: StreamModeArg) -> tuple[tuple[StreamMode, ...], bool]:
    """The requested modes, and whether chunks are `(mode, payload)` pairs (several asked)."""
    if isinstance(stream_mode, str):
        modes: tuple[StreamMode, ...] = (stream_mode,)
        paired = False
    else:
        modes, paired = tuple(stream_mode), True
    for mode in modes:
        if mode not in ("updates", "values"):
            raise ValueError(f"unknown stream_mode {mode!r}; use 'updates' or 'values'")
    return modes, paired


class CompiledStateGraph:
    """A runnable graph: `invoke`, `stream`, their async twins, and the state API."""

    def __init__(
        self,
        spec: GraphSpec,
        *,
        checkpointer: BaseCheckpointSaver | None = None,
        interrupt_before: InterruptNodes = (),
        interrupt_after: InterruptNodes = (),
        name: str = "StateGraph",
        single_writer: bool = False,
    ) -> None:
        self.spec = spec
        self.checkpointer = checkpointer
        self.interrupt_before = interrupt_before
        self.interrupt_after = interrupt_after
        self.name = name
        self.single_writer = single_writer

    def __repr__(self) -> str:
        return f"CompiledStateGraph({self.name!r}, nodes={sorted(self.spec.nodes)})"

    # -------------------------------------------------------------- plumbing
    def _runtime(
        self,
        saver: BaseCheckpointSaver,
        interrupt_before: InterruptNodes | None = None,
        interrupt_after: InterruptNodes | None = None,
    ) -> Runtime:
        return Runtime(
            graph=self.spec,
            next_version=getattr(saver, "get_next_version", next_channel_version),
            interrupt_before=self.interrupt_before
            if interrupt_before is None
            else interrupt_before,
            interrupt_after=self.interrupt_after if interrupt_after is None else interrupt_after,
        )

    def _for_run(self, config: RunnableConfig | None) -> tuple[BaseCheckpointSaver, RunnableConfig]:
        """The saver and config of one run. Without a checkpointer a run still persists its
        steps, in a throwaway in-memory saver, so one code path serves both."""
        if config is not None and not isinstance(config, Mapping):
            raise ConfigError(f"config must be a dict with a 'configurable' key, got {config!r}")
        config = dict(config or {})
        if not isinstance(config.get("configurable") or {}, Mapping):
            raise ConfigError("config['configurable'] must be a dict, e.g. {'thread_id': ...}")
        configurable = dict(config.get("configurable") or {})
        if self.checkpointer is not None:
            config["configurable"] = configurable
            thread_id_of(config)  # a clear error now rather than deep inside the saver
            return self.checkpointer, config
        configurable.setdefault("thread_id", f"ephemeral-{uuid.uuid4()}")
        configurable.pop("checkpoint_id", None)
        config["configurable"] = configurable
        return InMemorySaver(), config

    def _exclusive(self, config: RunnableConfig) -> bool:
        """Whether this run takes the thread's single-writer lock (see `graph.guard`);
        runs without a checkpointer have a private thread and need none."""
        return self.checkpointer is not None and guard.is_exclusive(config, self.single_writer)

    def _saver(self) -> BaseCheckpointSaver:
        if self.checkpointer is None:
            raise ValueError("this graph was compiled without a checkpointer: no state to read")
        return self.checkpointer

    # ------------------------------------------------------------------- sync
    def stream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: StreamModeArg = "updates",
        interrupt_before: InterruptNodes | None = None,
        interrupt_after: InterruptNodes | None = None,
    ) -> Iterator[Any]:
        """Run and yield per-step chunks: `{node: update}` ("updates", one per task) or the
        full state after each checkpoint ("values")."""
        modes, paired = _modes(stream_mode)
        saver, config = self._for_run(config)
        rt = self._runtime(saver, interrupt_before, interrupt_after)
        with guard.thread_lock(saver, thread_id_of(config), self._exclusive(config)) as lock:
            driver = guard.sync_driver(self.spec, saver, lock)
            for item in driver.drive(loop.run(rt, input, config, modes)):
                if not isinstance(item, Done):
                    yield item if paired else item[1]

    def invoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        interrupt_before: InterruptNodes | None = None,
        interrupt_after: InterruptNodes | None = None,
    ) -> dict[str, Any]:
        """Run until the graph ends or pauses; returns the output state (plus
        `"__interrupt__"` when a node asked a question)."""
        saver, config = self._for_run(config)
        rt = self._runtime(saver, interrupt_before, interrupt_after)
        with guard.thread_lock(saver, thread_id_of(config), self._exclusive(config)) as lock:
            return guard.sync_driver(self.spec, saver, lock).result(loop.run(rt, input, config))

    def get_state(self, config: RunnableConfig) -> StateSnapshot:
        """State at the checkpoint `config` names, or the thread's latest."""
        saver = self._saver()
        return SyncDriver(self.spec, saver).result(
            state_api.get_state(self._runtime(saver), config)
        )

    def get_state_history(
        self,
        config: RunnableConfig,
        *,
        filter: Mapping[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[StateSnapshot]:
        """Snapshots newest first (the thread, or the branch ending at `config`'s checkpoint),
        rebuilt in one forward pass."""
        saver = self._saver()
        program = history_mod.history(
            self._runtime(saver), config, filter=filter, before=before, limit=limit
        )
        yield from SyncDriver(self.spec, saver).result(program)

    def update_state(
        self, config: RunnableConfig, values: Any, as_node: str | None = None
    ) -> RunnableConfig:
        """Apply `values` as if `as_node` returned them; returns the new checkpoint's config.
        On a checkpoint that already has a successor this starts a new branch."""
        saver = self._saver()
        program = state_api.update_state(self._runtime(saver), config, values, as_node)
        with guard.thread_lock(saver, thread_id_of(config), self._exclusive(config)) as lock:
            return guard.sync_driver(self.spec, saver, lock).result(program)

    # ------------------------------------------------------------------ async
    async def astream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: StreamModeArg = "updates",
        interrupt_before: InterruptNodes | None = None,
        interrupt_after: InterruptNodes | None = None,
    ) -> AsyncIterator[Any]:
        modes, paired = _modes(stream_mode)
        saver, config = self._for_run(config)
        rt = self._runtime(saver, interrupt_before, interrupt_after)
        exclusive = self._exclusive(config)
        async with guard.athread_lock(saver, thread_id_of(config), exclusive) as lock:
            driver = guard.async_driver(self.spec, saver, lock)
            async for item in driver.drive(loop.run(rt, input, config, modes)):
                if not isinstance(item, Done):
                    yield item if paired else item[1]

    async def ainvoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        interrupt_before: InterruptNodes | None = None,
        interrupt_after: InterruptNodes | None = None,
    ) -> dict[str, Any]:
        saver, config = self._for_run(config)
        rt = self._runtime(saver, interrupt_before, interrupt_after)
        exclusive = self._exclusive(config)
        async with guard.athread_lock(saver, thread_id_of(config), exclusive) as lock:
            driver = guard.async_driver(self.spec, saver, lock)
            return await driver.result(loop.run(rt, input, config))

    async def aget_state(self, config: RunnableConfig) -> StateSnapshot:
        saver = self._saver()
        return await AsyncDriver(self.spec, saver).result(
            state_api.get_state(self._runtime(saver), config)
        )

    async def aget_state_history(
        self,
        config: RunnableConfig,
        *,
        filter: Mapping[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[StateSnapshot]:
        saver = self._saver()
        program = history_mod.history(
            self._runtime(saver), config, filter=filter, before=before, limit=limit
        )
        for snapshot in await AsyncDriver(self.spec, saver).result(program):
            yield snapshot

    async def aupdate_state(
        self, config: RunnableConfig, values: Any, as_node: str | None = None
    ) -> RunnableConfig:
        saver = self._saver()
        program: Program[RunnableConfig] = state_api.update_state(
            self._runtime(saver), config, values, as_node
        )
        exclusive = self._exclusive(config)
        async with guard.athread_lock(saver, thread_id_of(config), exclusive) as lock:
            return await guard.async_driver(self.spec, saver, lock).result(program)


StreamModeLiteral = Literal["updates", "values"]
