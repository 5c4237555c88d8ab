"""Use our savers as LangGraph checkpointers: `graph.compile(checkpointer=...)`.

Needs the `langgraph` extra. The rest of the package never imports this module.

    from checkpointer.langgraph import LangGraphSaver
    from checkpointer.savers.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string("chat.db") as saver:
        graph = builder.compile(checkpointer=LangGraphSaver(saver))

Every saver serves both `invoke` and `ainvoke`. Values LangGraph stores (LangChain messages,
`Send`, `Interrupt`, `Command`, `Overwrite`, delta snapshots) round-trip exactly; your own
state classes are loadable because LangGraph hands the adapter an allowlist of the types in
your graph's schema when it compiles (`with_allowlist`), and you can add more with
`LangGraphSaver(saver, allowed_types=[...], allowed_modules=[...])`.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver as LangGraphBaseSaver
from langgraph.checkpoint.base import ChannelVersions
from langgraph.checkpoint.base import Checkpoint as LangGraphCheckpoint
from langgraph.checkpoint.base import CheckpointMetadata as LangGraphMetadata
from langgraph.checkpoint.base import CheckpointTuple as LangGraphTuple
from langgraph.checkpoint.base import DeltaChannelHistory as LangGraphHistory
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.types import Interrupt, Send
from langgraph.types import Overwrite as LangGraphOverwrite

from checkpointer.channels.markers import DeltaSnapshot, Overwrite
from checkpointer.errors import ConfigError
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.serde.msgpack_serde import MsgpackSerializer, register_codec
from checkpointer.types import CheckpointTuple, DeltaChannelHistory, PendingWrite

# Modules whose dataclasses, pydantic models and named tuples LangGraph puts in state.
LANGGRAPH_MODULES = (
    "langgraph.types",
    "langgraph.checkpoint.serde.types",
    "langchain_core.messages",
    "langchain_core.documents",
)


def _encode_send(send: Send) -> list[Any]:
    return [send.node, send.arg, send.timeout]


def _decode_send(payload: Any) -> Send:
    node, arg, timeout = payload
    return Send(node, arg, timeout=timeout)


def _encode_interrupt(interrupt: Interrupt) -> list[Any]:
    schema = interrupt.response_schema if isinstance(interrupt.response_schema, dict) else None
    return [interrupt.value, interrupt.id, schema]


def _decode_interrupt(payload: Any) -> Interrupt:
    value, interrupt_id, schema = payload
    return Interrupt(value=value, id=interrupt_id, response_schema=schema)


register_codec("langgraph.Send", Send, _encode_send, _decode_send)
register_codec("langgraph.Interrupt", Interrupt, _encode_interrupt, _decode_interrupt)


def langgraph_serializer(
    base: MsgpackSerializer | None = None,
    *,
    allowed_types: Sequence[type] = (),
    allowed_modules: Sequence[str] = (),
) -> MsgpackSerializer:
    """Our serializer, able to load what LangGraph stores plus the given types."""
    serde = base if base is not None else MsgpackSerializer()
    return serde.with_modules(*LANGGRAPH_MODULES, *allowed_modules).with_types(*allowed_types)


def _extend(serde: Any, classes: Sequence[type], modules: Sequence[str]) -> Any:
    """`serde` allowing more types, keeping its wrappers (compression, encryption, size
    guard: each has an `inner` serializer) around the msgpack serializer at the core."""
    if isinstance(serde, MsgpackSerializer):
        return serde.with_modules(*modules).with_types(*classes)
    inner = getattr(serde, "inner", None)
    if inner is None:
        return serde  # a serializer of the user's own: its allowlist is theirs to manage
    clone = copy.copy(serde)
    clone.inner = _extend(inner, classes, modules)
    return clone


# ------------------------------------------------------------ value conversion
_LANGGRAPH_MARKERS = (_DeltaSnapshot, LangGraphOverwrite)
_OUR_MARKERS = (DeltaSnapshot, Overwrite)


def _stored_value(value: Any) -> Any:
    """LangGraph's markers as ours, so our tools (CLI, prune) recognise them."""
    if not isinstance(value, _LANGGRAPH_MARKERS):  # almost every value: one check
        return value
    if isinstance(value, _DeltaSnapshot):
        return DeltaSnapshot(value.value)
    return Overwrite(value.value)


def _langgraph_value(value: Any) -> Any:
    if not isinstance(value, _OUR_MARKERS):
        return value
    if isinstance(value, DeltaSnapshot):
        return _DeltaSnapshot(value.value)
    return LangGraphOverwrite(value.value)


def _langgraph_writes(writes: Sequence[PendingWrite] | None) -> list[PendingWrite] | None:
    """The writes with our markers as LangGraph's; the list itself when none holds one
    (a delta history is a thousand writes, almost never a marker)."""
    if writes is None:
        return None
    if isinstance(writes, list) and not any(isinstance(w[2], _OUR_MARKERS) for w in writes):
        return writes
    return [(task_id, channel, _langgraph_value(value)) for task_id, channel, value in writes]


def _langgraph_tuple(tup: CheckpointTuple | None) -> LangGraphTuple | None:
    if tup is None:
        return None
    checkpoint: dict[str, Any] = dict(tup.checkpoint)
    values = checkpoint["channel_values"]
    if any(isinstance(v, _OUR_MARKERS) for v in values.values()):
        checkpoint["channel_values"] = {k: _langgraph_value(v) for k, v in values.items()}
    else:
        checkpoint["channel_values"] = dict(values)
    return LangGraphTuple(
        config=tup.config,  # type: ignore[arg-type]
        checkpoint=checkpoint,  # type: ignore[arg-type]
        metadata=tup.metadata,
        parent_config=tup.parent_config,  # type: ignore[arg-type]
        pending_writes=_langgraph_writes(tup.pending_writes),
    )


def _stored_checkpoint(checkpoint: LangGraphCheckpoint) -> Any:
    stored = dict(checkpoint)
    values = checkpoint["channel_values"]
    if any(isinstance(v, _LANGGRAPH_MARKERS) for v in values.values()):
        stored["channel_values"] = {k: _stored_value(v) for k, v in values.items()}
    else:
        stored["channel_values"] = dict(values)
    stored.setdefault("updated_channels", None)
    stored.pop("pending_sends", None)
    return stored


def _stored_writes(writes: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The writes, as a list of their own, with LangGraph's markers as ours (every step
    writes, markers are rare: most batches need no per-write conversion)."""
    if any(isinstance(value, _LANGGRAPH_MARKERS) for _, value in writes):
        return [(channel, _stored_value(value)) for channel, value in writes]
    return list(writes)


def _langgraph_history(
    histories: Mapping[str, DeltaChannelHistory],
) -> dict[str, LangGraphHistory]:
    out: dict[str, LangGraphHistory] = {}
    for channel, history in histories.items():
        entry: LangGraphHistory = {"writes": _langgraph_writes(history["writes"]) or []}
        if "seed" in history:
            entry["seed"] = _langgraph_value(history["seed"])
        out[channel] = entry
    return out


def _before_config(before: Any) -> Any:
    """`list(before=...)` as a config, from any shape LangGraph's callers send.

    A config `{"configurable": {"checkpoint_id": ...}}` passes through. The Agent Server
    hands the SDK's checkpoint dict on as it came (`{"thread_id", "checkpoint_ns",
    "checkpoint_id", "checkpoint_map"}`, no `configurable`), and a bare id string is what
    its GET history route takes; both mean "older than that checkpoint".
    """
    if before is None or (isinstance(before, Mapping) and "configurable" in before):
        return before
    if isinstance(before, str):
        return {"configurable": {"checkpoint_id": before}}
    if isinstance(before, Mapping) and "checkpoint_id" in before:
        return {"configurable": {"checkpoint_id": before["checkpoint_id"]}}
    raise ConfigError(
        "before must be a config {'configurable': {'checkpoint_id': ...}}, a checkpoint "
        f"dict with a 'checkpoint_id' key, or a checkpoint id; got {before!r}"
    )


class LangGraphSaver(LangGraphBaseSaver[str]):
    """A LangGraph checkpointer backed by any of our savers, sync or async.

    Sync savers also serve LangGraph's async methods (in a worker thread); async savers
    serve the sync ones from other threads. Lifecycle operations (`delete_for_runs`,
    `copy_thread`, `prune`) and the one-statement `get_delta_channel_history` come with it.
    """

    saver: BaseCheckpointSaver

    def __init__(
        self,
        saver: BaseCheckpointSaver,
        *,
        allowed_types: Sequence[type] = (),
        allowed_modules: Sequence[str] = (),
    ) -> None:
        serde = _extend(saver.serde, allowed_types, (*LANGGRAPH_MODULES, *allowed_modules))
        super().__init__(serde=serde)
        # The saver itself learns LangGraph's types too, so reading it directly (list, the
        # CLI's API, retention with materialization) loads what LangGraph stored.
        saver.serde = serde
        self.saver = saver

    # LangGraph calls this when it compiles a graph, with (module, name) of its state types.
    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> LangGraphSaver:
        classes = [cls for cls in map(_loaded_class, extra_allowlist) if cls is not None]
        if not classes:
            return self
        clone = copy.copy(self)
        clone.saver = copy.copy(self.saver)
        clone.saver.serde = _extend(self.saver.serde, classes, ())
        clone.serde = clone.saver.serde
        return clone

    # ----------------------------------------------------------------- sync API
    def get_tuple(self, config: Any) -> LangGraphTuple | None:
        return _langgraph_tuple(self.saver.get_tuple(config))

    def list(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> Iterator[LangGraphTuple]:
        before = _before_config(before)
        for tup in self.saver.list(config, filter=filter, before=before, limit=limit):
            converted = _langgraph_tuple(tup)
            assert converted is not None
            yield converted

    def put(
        self,
        config: Any,
        checkpoint: LangGraphCheckpoint,
        metadata: LangGraphMetadata,
        new_versions: ChannelVersions,
    ) -> Any:
        return self.saver.put(config, _stored_checkpoint(checkpoint), metadata, new_versions)

    def put_writes(
        self,
        config: Any,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        stored = _stored_writes(writes)
        self.saver.put_writes(config, stored, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.saver.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.saver.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.saver.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.saver.prune(thread_ids, strategy=strategy)

    def get_delta_channel_history(
        self, *, config: Any, channels: Sequence[str]
    ) -> Mapping[str, LangGraphHistory]:
        return _langgraph_history(
            self.saver.get_delta_channel_history(config=config, channels=channels)
        )

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return self.saver.get_next_version(current)

    # ---------------------------------------------------------------- async API
    async def aget_tuple(self, config: Any) -> LangGraphTuple | None:
        return _langgraph_tuple(await self.saver.aget_tuple(config))

    async def alist(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> AsyncIterator[LangGraphTuple]:
        before = _before_config(before)
        async for tup in self.saver.alist(config, filter=filter, before=before, limit=limit):
            converted = _langgraph_tuple(tup)
            assert converted is not None
            yield converted

    async def aput(
        self,
        config: Any,
        checkpoint: LangGraphCheckpoint,
        metadata: LangGraphMetadata,
        new_versions: ChannelVersions,
    ) -> Any:
        return await self.saver.aput(
            config,
            _stored_checkpoint(checkpoint),
            metadata,
            new_versions,
        )

    async def aput_writes(
        self,
        config: Any,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        stored = _stored_writes(writes)
        await self.saver.aput_writes(config, stored, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.saver.adelete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.saver.adelete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.saver.acopy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.saver.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: Any, channels: Sequence[str]
    ) -> Mapping[str, LangGraphHistory]:
        return _langgraph_history(
            await self.saver.aget_delta_channel_history(config=config, channels=channels)
        )


def _loaded_class(entry: tuple[str, ...]) -> type | None:
    """The class an allowlist entry names, if its module is already loaded (never imports)."""
    if len(entry) < 2:
        return None
    module = sys.modules.get(entry[0])
    obj: Any = module
    for part in entry[1:]:
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None
