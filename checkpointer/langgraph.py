"""Use our savers as LangGraph checkpointers: `graph.compile(checkpointer=...)`.

Needs the `langgraph` extra. The rest of the package never imports this module.

    from checkpointer.langgraph import LangGraphSaver
    from checkpointer.savers.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string("chat.db") as saver:
        graph = builder.compile(checkpointer=LangGraphSaver(saver))

Every saver serves both `invoke` and `ainvoke`. Values LangGraph stores (LangChain messages,
`Send`, `Interrupt`, `Command`, `Overwrite`, delta snapshots) round-trip exactly; your own
state classes (dataclasses, pydantic models, enums, named tuples of your application's
modules) and any exception load with no configuration, without running their code (see
`checkpointer.serde.classes`). Classes of installed packages need
`LangGraphSaver(saver, allowed_types=[...], allowed_modules=[...])`, or LangGraph's schema
allowlist (`with_allowlist`, handed over when LANGGRAPH_STRICT_MSGPACK=true).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import inspect
import math
import os
import sys
from collections import ChainMap
from collections.abc import AsyncIterator, Awaitable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
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
from checkpointer.errors import ConfigError, DeserializationError, ParentMismatchError
from checkpointer.langgraph_lifecycle import (
    Opening,
    aclose_saver,
    asetup_saver,
    close_saver,
    setup_saver,
)
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.serde.classes import find_loaded, registered_named
from checkpointer.serde.msgpack_serde import MsgpackSerializer, register_codec
from checkpointer.types import TASKS, CheckpointTuple, DeltaChannelHistory, PendingWrite

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
    """A `Send` from plain data only: a node name, its argument, a timeout given as a
    number, a timedelta or LangGraph's own `TimeoutPolicy` (rebuilt as plain data)."""
    if type(payload) is not list or len(payload) != 3:
        raise DeserializationError("malformed langgraph.Send payload")
    node, arg, timeout = payload
    timeout_ok = timeout is None or type(timeout) in (int, float, timedelta)
    if not timeout_ok:
        policy = getattr(sys.modules.get("langgraph.types"), "TimeoutPolicy", None)
        timeout_ok = isinstance(policy, type) and type(timeout) is policy
    if type(node) is not str or not timeout_ok:
        raise DeserializationError("malformed langgraph.Send payload")
    return Send(node, arg, timeout=timeout)


def _encode_interrupt(interrupt: Interrupt) -> list[Any]:
    schema = interrupt.response_schema if isinstance(interrupt.response_schema, dict) else None
    return [interrupt.value, interrupt.id, schema]


def _decode_interrupt(payload: Any) -> Interrupt:
    """An `Interrupt` from plain data only: its value, a string id, a JSON schema dict."""
    if type(payload) is not list or len(payload) != 3:
        raise DeserializationError("malformed langgraph.Interrupt payload")
    value, interrupt_id, schema = payload
    if type(interrupt_id) is not str or not (schema is None or type(schema) is dict):
        raise DeserializationError("malformed langgraph.Interrupt payload")
    return Interrupt(value=value, id=interrupt_id, response_schema=schema)


register_codec("langgraph.Send", Send, _encode_send, _decode_send)
register_codec("langgraph.Interrupt", Interrupt, _encode_interrupt, _decode_interrupt)


def _import_value_modules() -> None:
    """Import the modules of `LANGGRAPH_MODULES`: loading finds classes among the modules
    already imported (stored bytes never import), and a tool reading a database may not
    have imported `langchain_core.documents` itself."""
    for name in LANGGRAPH_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def langgraph_serializer(
    base: MsgpackSerializer | None = None,
    *,
    allowed_types: Sequence[type] = (),
    allowed_modules: Sequence[str] = (),
) -> MsgpackSerializer:
    """Our serializer, able to load what LangGraph stores plus the given types."""
    _import_value_modules()
    serde = base if base is not None else MsgpackSerializer()
    return serde.with_modules(*LANGGRAPH_MODULES, *allowed_modules).with_types(*allowed_types)


def _extend(
    serde: Any,
    classes: Sequence[type],
    modules: Sequence[str],
    names: Collection[tuple[str, str]] = (),
) -> Any:
    """`serde` allowing more types, keeping its wrappers (compression, encryption, size
    guard: each has an `inner` serializer) around the msgpack serializer at the core."""
    if isinstance(serde, MsgpackSerializer):
        extended = serde.with_modules(*modules).with_types(*classes)
        return extended.with_allowlist(names) if names else extended
    inner = getattr(serde, "inner", None)
    if inner is None:
        return serde  # a serializer of the user's own: its allowlist is theirs to manage
    clone = copy.copy(serde)
    clone.inner = _extend(inner, classes, modules, names)
    return clone


# ------------------------------------------------------------ value conversion
_LANGGRAPH_MARKERS = (_DeltaSnapshot, LangGraphOverwrite)
_OUR_MARKERS = (DeltaSnapshot, Overwrite)
_CONVERTED_ON_PUT = (*_LANGGRAPH_MARKERS, BaseException)
"""Values LangGraph hands us that are stored in another form (one isinstance per value)."""


def _stored_value(value: Any) -> Any:
    """LangGraph's markers as ours, so our tools (CLI, prune) recognise them; an exception
    as its repr, the form LangGraph's own savers store (its serializer writes any exception
    so), which LangGraph and its apps read back: a failed task's `error` in a state
    snapshot is a string, and so is the error an error handler gets on resume. Our own
    runtime (`checkpointer.graph`) writes through the saver directly and keeps exceptions
    as they were."""
    if not isinstance(value, _CONVERTED_ON_PUT):  # almost every value: one check
        return value
    if isinstance(value, BaseException):
        return repr(value)
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
    if isinstance(writes, list):
        for write in writes:  # a loop, not any(<generator>): this runs per listed tuple
            if isinstance(write[2], _OUR_MARKERS):
                break
        else:
            return writes
    return [(task_id, channel, _langgraph_value(value)) for task_id, channel, value in writes]


def _langgraph_tuple(tup: CheckpointTuple | None, own: bool = False) -> LangGraphTuple | None:
    """`tup` as LangGraph's tuple, our markers as LangGraph's. The checkpoint and its values
    are copies (the caller may change them, `_with_sends` does) unless the saver says its
    tuples are the caller's `own` (`returns_own_tuples`: decoded for this call alone)."""
    if tup is None:
        return None
    checkpoint: dict[str, Any] = tup.checkpoint if own else dict(tup.checkpoint)  # type: ignore[assignment]
    values = checkpoint["channel_values"]
    for value in values.values():  # a loop, not any(<generator>): once per listed tuple
        if isinstance(value, _OUR_MARKERS):
            checkpoint["channel_values"] = {k: _langgraph_value(v) for k, v in values.items()}
            break
    else:
        if not own:
            checkpoint["channel_values"] = dict(values)
    # Positional (config, checkpoint, metadata, parent_config, pending_writes): keywords
    # cost a NamedTuple more than its fields.
    return LangGraphTuple(
        tup.config,  # type: ignore[arg-type]
        checkpoint,  # type: ignore[arg-type]
        tup.metadata,
        tup.parent_config,  # type: ignore[arg-type]
        _langgraph_writes(tup.pending_writes),
    )


SENDS_IN_CHANNEL_FORMAT = 4
"""The checkpoint format (`v`) from which pending sends are the `TASKS` channel. Before
it, LangGraph's PostgreSQL saver kept them as the parent's `TASKS` writes, and moves them
into the channel when it reads such a checkpoint (`_migrate_pending_sends`); the adapter
does the same on every saver, so such checkpoints read alike wherever they are stored."""


def _sends_parent(tup: CheckpointTuple | None) -> Any:
    """The parent whose `TASKS` writes are the pending sends of `tup`: only for a
    checkpoint older than `SENDS_IN_CHANNEL_FORMAT` (None for every current one)."""
    if tup is None or tup.parent_config is None:
        return None
    version = tup.checkpoint.get("v")
    if type(version) is not int or version >= SENDS_IN_CHANNEL_FORMAT:
        return None
    return tup.parent_config


def _with_sends(
    tup: LangGraphTuple, parent: CheckpointTuple | None, next_version: Any
) -> LangGraphTuple:
    """`tup` (a fresh conversion, changed in place) with its parent's `TASKS` writes as
    the `TASKS` channel, in stored order (task path, task id, index), at the newest version
    of the checkpoint (the first version when it has none), as LangGraph migrates them."""
    writes = (parent.pending_writes or []) if parent is not None else []
    sends = [_langgraph_value(value) for _, channel, value in writes if channel == TASKS]
    if not sends:
        return tup
    checkpoint: dict[str, Any] = tup.checkpoint  # type: ignore[assignment]
    versions = dict(checkpoint["channel_versions"])
    checkpoint["channel_values"][TASKS] = sends
    versions[TASKS] = max(versions.values()) if versions else next_version(None)
    checkpoint["channel_versions"] = versions
    return tup


def _stored_checkpoint(
    checkpoint: LangGraphCheckpoint, new_versions: ChannelVersions, next_version: Any
) -> tuple[Any, ChannelVersions]:
    """The checkpoint as our savers store it, and the versions to store values at. An
    empty `pending_sends` (LangGraph's `empty_checkpoint()`) is kept, as its savers keep
    it; the sends of an older format are moved into the `TASKS` channel at put, as
    LangGraph moves them when it reads such a checkpoint (`Pregel._migrate_checkpoint`, at
    the newest version; `next_version(None)` when there is none), so no saver loses them
    (the SQL savers' records are JSON, which a `Send` is not)."""
    stored: dict[str, Any] = dict(checkpoint)
    values = checkpoint["channel_values"]
    for value in values.values():  # a loop, not any(<generator>): every step puts
        if isinstance(value, _CONVERTED_ON_PUT):
            stored["channel_values"] = {k: _stored_value(v) for k, v in values.items()}
            break
    else:
        stored["channel_values"] = dict(values)
    stored.setdefault("updated_channels", None)
    sends = stored.get("pending_sends")
    version = stored.get("v")
    if sends and type(version) is int and version < SENDS_IN_CHANNEL_FORMAT:
        versions = dict(stored["channel_versions"])
        del stored["pending_sends"]
        versions[TASKS] = max(versions.values()) if versions else next_version(None)
        stored["channel_versions"] = versions
        stored["channel_values"][TASKS] = [_stored_value(send) for send in sends]
        new_versions = {**new_versions, TASKS: versions[TASKS]}
    return stored, new_versions


def _stored_writes(writes: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The writes, as a list of their own, with LangGraph's markers as ours and exceptions
    as their repr (every step writes, these are rare: most batches need no per-write
    conversion)."""
    for _, value in writes:  # a loop, not any(<generator>): every step writes
        if isinstance(value, _CONVERTED_ON_PUT):
            return [(channel, _stored_value(value)) for channel, value in writes]
    return list(writes)


def _langgraph_history(
    histories: Mapping[str, DeltaChannelHistory],
) -> dict[str, LangGraphHistory]:
    out: dict[str, LangGraphHistory] = {}
    for channel, history in histories.items():
        entry: LangGraphHistory = {"writes": _langgraph_writes(history["writes"]) or []}
        # A stored None seeds our savers' walks (DESIGN 3.3), but LangGraph's savers give
        # no seed for it (its PostgreSQL saver cannot tell a stored null from none, and its
        # tests expect the key absent): LangGraph then replays the writes from an empty
        # channel, which its reducers take where None would break most of them.
        if history.get("seed") is not None:
            entry["seed"] = _langgraph_value(history["seed"])
        out[channel] = entry
    return out


# Run config keys LangGraph's savers never copy into checkpoint metadata (they address the
# checkpoint or describe the running task: see `get_checkpoint_metadata` in
# langgraph.checkpoint.base, whose rules `run_metadata` follows).
_RUN_KEYS_NOT_IN_METADATA = frozenset(
    {
        "thread_id",
        "checkpoint_id",
        "checkpoint_ns",
        "checkpoint_map",
        "langgraph_step",
        "langgraph_node",
        "langgraph_triggers",
        "langgraph_path",
        "langgraph_checkpoint_ns",
    }
)


def _under_parent(config: Any, refused: ParentMismatchError) -> Any:
    """`config` naming the parent a checkpoint is stored with, for a re-put that named
    another one. LangGraph's savers take such a re-put (its tests re-put a checkpoint under
    its own child); ours refuse to move a stored checkpoint, which could close a loop of
    parent pointers. The adapter meets both as LangGraph's PostgresSaver does: the re-put
    replaces the checkpoint and its metadata, the parent stays. No loop is ever stored,
    so every walk still ends at a root."""
    configurable = dict(config.get("configurable") or {})
    if refused.stored_parent_id is None:
        configurable.pop("checkpoint_id", None)
    else:
        configurable["checkpoint_id"] = refused.stored_parent_id
    return {**config, "configurable": configurable}


def run_metadata(config: Mapping[str, Any], metadata: Mapping[str, Any]) -> Any:
    """`metadata` plus the run's own keys, as LangGraph's savers store it, so that
    `list(None, filter={"user_id": ...})` finds a user's checkpoints: each scalar (str,
    int, float, bool) of `config["metadata"]`, then of `config["configurable"]`, that the
    metadata does not already have, except keys starting with "__" (LangGraph's internals)
    and those naming the checkpoint or the task. As LangGraph's savers, NUL characters are
    removed from top-level strings (a filter on the value LangGraph stored must find it;
    nested values and our own API keep them); a NaN or infinite number is left out (it is
    not JSON, and the run's config should not make its checkpoints unstorable)."""
    merged = dict(metadata)
    for key, value in merged.items():
        if isinstance(value, str) and "\x00" in value:  # `_without_nul`, inlined
            merged[key] = value.replace("\x00", "")
    for source in (config.get("metadata"), config.get("configurable")):
        if not source:
            continue
        if type(source) is ChainMap:  # LangGraph's run metadata: see `_flat`
            source = _flat(source)
        for key, value in source.items():
            if key in merged or key in _RUN_KEYS_NOT_IN_METADATA or key.startswith("__"):
                continue
            if isinstance(value, (str, int, bool)) or (
                isinstance(value, float) and math.isfinite(value)  # NaN is not JSON
            ):
                merged[key] = _without_nul(value)
    return merged


def _flat(chain: ChainMap[Any, Any]) -> Mapping[Any, Any]:
    """`chain` as one dict when its maps are all dicts: its keys in the order it iterates
    them, each with the value of the first map that has it. Iterating a ChainMap's items
    calls Python code per key (`__iter__` merges its maps, `__getitem__` searches them);
    this is one C-level update per map. Other maps (a `__missing__` would answer
    `ChainMap.__getitem__`) keep the chain as it is."""
    maps = chain.maps
    for mapping in maps:
        if type(mapping) is not dict:
            return chain
    flat: dict[Any, Any] = {}
    for mapping in reversed(maps):
        flat.update(mapping)
    return flat


def _without_nul(value: Any) -> Any:
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "")
    return value


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

    @property
    def _own_tuples(self) -> bool:
        """Whether the saver's tuples are decoded for each call (no copy needed)."""
        return getattr(self.saver, "returns_own_tuples", False) is True

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def from_conn_string(
        cls,
        conn_string: str | os.PathLike[str],
        *,
        setup: bool = True,
        allowed_types: Sequence[type] = (),
        allowed_modules: Sequence[str] = (),
        **options: Any,
    ) -> Opening[LangGraphSaver]:
        """A checkpointer on a database URL, as a context manager that closes it: `with`
        gives one on a sync saver, `async with` one on an async saver (the shapes of
        LangGraph's `SqliteSaver`/`PostgresSaver` and `AsyncSqliteSaver`/
        `AsyncPostgresSaver.from_conn_string`). `conn_string` is a `postgresql://` URL, a
        `sqlite:///path` URL, a path, or ":memory:"; `options` go to the saver (`schema=`,
        `pool=`, `serde=`, ...). The schema is created or upgraded on open unless
        `setup=False` (idempotent, and a no-op on a current schema, so an app that also
        calls `setup()` as LangGraph's docs do loses nothing)."""

        def wrap(saver: BaseCheckpointSaver) -> LangGraphSaver:
            return cls(saver, allowed_types=allowed_types, allowed_modules=allowed_modules)

        return Opening(wrap, conn_string, setup, options)

    @classmethod
    def afrom_conn_string(
        cls,
        conn_string: str | os.PathLike[str],
        *,
        setup: bool = True,
        allowed_types: Sequence[type] = (),
        allowed_modules: Sequence[str] = (),
        **options: Any,
    ) -> AbstractAsyncContextManager[LangGraphSaver]:
        """`from_conn_string` for `async with`, named for async code that says so."""
        return cls.from_conn_string(
            conn_string,
            setup=setup,
            allowed_types=allowed_types,
            allowed_modules=allowed_modules,
            **options,
        )

    def setup(self) -> Awaitable[None] | None:
        """Create or upgrade the schema (idempotent). On an async saver, called from its
        event loop, returns an awaitable: `await checkpointer.setup()` as with LangGraph's
        async savers."""
        return setup_saver(self.saver)

    async def asetup(self) -> None:
        await asetup_saver(self.saver)

    def close(self) -> Awaitable[None] | None:
        """Close the saver (on an async one's event loop: an awaitable, see `setup`)."""
        return close_saver(self.saver)

    async def aclose(self) -> None:
        await aclose_saver(self.saver)

    def __enter__(self) -> LangGraphSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        pending = self.close()
        if inspect.isawaitable(pending):  # an async saver on its own loop: `async with`
            self._closing = asyncio.ensure_future(pending)  # is the way; close it anyway

    async def __aenter__(self) -> LangGraphSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # LangGraph calls this when it compiles a graph with LANGGRAPH_STRICT_MSGPACK=true,
    # with (module, name) of the types in its state schema.
    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> LangGraphSaver:
        """A saver that also loads the classes LangGraph lists. Each entry allows the class
        of that module whose own name matches, found loaded by its exact name or (a class
        defined in a function) in the classes this process wrote or registered; nothing is
        imported. Our default policy already loads the application's own classes, so this
        matters for strict serializers and for classes of installed packages."""
        names = {
            (entry[0], entry[-1])
            for entry in extra_allowlist
            if isinstance(entry, tuple)
            and len(entry) >= 2
            and all(isinstance(part, str) for part in entry)
        }
        if not names:
            return self
        classes = [cls for cls in map(_loaded_class, sorted(names)) if cls is not None]
        clone = copy.copy(self)
        clone.saver = copy.copy(self.saver)
        clone.saver.serde = _extend(self.saver.serde, classes, (), names)
        clone.serde = clone.saver.serde
        return clone

    # ----------------------------------------------------------------- sync API
    def get_tuple(self, config: Any) -> LangGraphTuple | None:
        return self._read_sends(self.saver.get_tuple(config))

    def _read_sends(self, tup: CheckpointTuple | None) -> LangGraphTuple | None:
        """`tup` for LangGraph, with pending sends of an old format moved into their
        channel (`_with_sends`): one more read, only for such a checkpoint."""
        converted = _langgraph_tuple(tup, self._own_tuples)
        parent = _sends_parent(tup)
        if parent is None or converted is None:
            return converted
        return _with_sends(converted, self.saver.get_tuple(parent), self.get_next_version)

    async def _aread_sends(self, tup: CheckpointTuple | None) -> LangGraphTuple | None:
        converted = _langgraph_tuple(tup, self._own_tuples)
        parent = _sends_parent(tup)
        if parent is None or converted is None:
            return converted
        return _with_sends(converted, await self.saver.aget_tuple(parent), self.get_next_version)

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
            converted = self._read_sends(tup)
            assert converted is not None
            yield converted

    def put(
        self,
        config: Any,
        checkpoint: LangGraphCheckpoint,
        metadata: LangGraphMetadata,
        new_versions: ChannelVersions,
    ) -> Any:
        stored, new_versions = _stored_checkpoint(checkpoint, new_versions, self.get_next_version)
        meta = run_metadata(config, metadata)
        try:
            return self.saver.put(config, stored, meta, new_versions)
        except ParentMismatchError as err:  # a re-put keeps its parent, see `_under_parent`
            return self.saver.put(_under_parent(config, err), stored, meta, new_versions)

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

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, replace: bool = False
    ) -> None:
        self.saver.copy_thread(source_thread_id, target_thread_id, replace=replace)

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
        return await self._aread_sends(await self.saver.aget_tuple(config))

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
            converted = await self._aread_sends(tup)
            assert converted is not None
            yield converted

    async def aput(
        self,
        config: Any,
        checkpoint: LangGraphCheckpoint,
        metadata: LangGraphMetadata,
        new_versions: ChannelVersions,
    ) -> Any:
        stored, new_versions = _stored_checkpoint(checkpoint, new_versions, self.get_next_version)
        meta = run_metadata(config, metadata)
        try:
            return await self.saver.aput(config, stored, meta, new_versions)
        except ParentMismatchError as err:  # a re-put keeps its parent, see `_under_parent`
            return await self.saver.aput(_under_parent(config, err), stored, meta, new_versions)

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

    async def acopy_thread(
        self, source_thread_id: str, target_thread_id: str, *, replace: bool = False
    ) -> None:
        await self.saver.acopy_thread(source_thread_id, target_thread_id, replace=replace)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.saver.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: Any, channels: Sequence[str]
    ) -> Mapping[str, LangGraphHistory]:
        return _langgraph_history(
            await self.saver.aget_delta_channel_history(config=config, channels=channels)
        )


def _loaded_class(entry: tuple[str, str]) -> type | None:
    """The class a `(module, name)` allowlist entry names: the module's own top-level class
    of that name if the module is loaded, else the one class of that module and name this
    process wrote or registered. Never imports, never follows an attribute into another
    module (a class the module merely imported does not count)."""
    module, name = entry
    found = find_loaded(module, name)
    if found is not None:
        return found
    candidates = registered_named(module, name)
    return candidates[0] if len(candidates) == 1 else None
