"""Records exchanged between runtimes and savers.

The shapes follow LangGraph's (plain dicts and tuples, no LangChain import) so that a
checkpoint written by one runtime reads the same through the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from checkpointer.errors import ConfigError, IdTooLongError
from checkpointer.ids import new_checkpoint_id

RunnableConfig = dict[str, Any]
"""`{"configurable": {"thread_id": ..., "checkpoint_ns": ..., "checkpoint_id": ...}}`."""

ChannelVersion = str | int | float
ChannelVersions = dict[str, ChannelVersion]

PendingWrite = tuple[str, str, Any]
"""`(task_id, channel, value)`: one write a task made, not yet applied to a checkpoint."""

CHECKPOINT_FORMAT_VERSION = 4

# Channels with a reserved meaning. Their writes take a fixed negative `idx`, and a batch made
# only of them replaces what was stored (the runtime re-sends the latest error or interrupt).
ERROR = "__error__"
SCHEDULED = "__scheduled__"
INTERRUPT = "__interrupt__"
RESUME = "__resume__"
TASKS = "__pregel_tasks"
WRITES_IDX_MAP: dict[str, int] = {ERROR: -1, SCHEDULED: -2, INTERRUPT: -3, RESUME: -4}

Source = Literal["input", "loop", "update", "fork"]


class CheckpointMetadata(TypedDict, total=False):
    """What the runtime records about a checkpoint; user keys are allowed too."""

    source: Source
    step: int
    parents: dict[str, str]
    run_id: str
    counters_since_delta_snapshot: dict[str, tuple[int, int]]


class Checkpoint(TypedDict):
    """The state of every channel after one superstep."""

    v: int
    id: str
    ts: str
    channel_values: dict[str, Any]
    channel_versions: ChannelVersions
    versions_seen: dict[str, ChannelVersions]
    updated_channels: list[str] | None


class CheckpointTuple(NamedTuple):
    """A checkpoint as a saver returns it, with where it lives and what is pending on it."""

    config: RunnableConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    parent_config: RunnableConfig | None = None
    pending_writes: list[PendingWrite] | None = None


class DeltaChannelHistory(TypedDict):
    """What the ancestor walk found for one delta channel.

    `writes` are oldest first; `seed` is the value stored at the nearest ancestor that holds
    one, absent when the walk reached the root without finding any (start empty).
    """

    writes: list[PendingWrite]
    seed: NotRequired[Any]


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat()


def empty_checkpoint() -> Checkpoint:
    """A checkpoint with no channel values, the starting point of a new thread."""
    return Checkpoint(
        v=CHECKPOINT_FORMAT_VERSION,
        id=new_checkpoint_id(),
        ts=utc_now_iso(),
        channel_values={},
        channel_versions={},
        versions_seen={},
        updated_channels=None,
    )


def copy_checkpoint(checkpoint: Checkpoint) -> Checkpoint:
    """A copy whose dicts can be changed without touching the original."""
    return Checkpoint(
        v=checkpoint["v"],
        id=checkpoint["id"],
        ts=checkpoint["ts"],
        channel_values=dict(checkpoint["channel_values"]),
        channel_versions=dict(checkpoint["channel_versions"]),
        versions_seen={k: dict(v) for k, v in checkpoint["versions_seen"].items()},
        updated_channels=checkpoint.get("updated_channels"),
    )


def make_config(
    thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
) -> RunnableConfig:
    """Build the config that addresses a thread, or one checkpoint of it."""
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _configurable(config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if type(config) is dict:  # the common case, without an ABC check
        configurable = config.get("configurable")
        if type(configurable) is dict:
            return configurable
    if not isinstance(config, Mapping):
        raise ConfigError(f"config must be a dict with a 'configurable' key, got {config!r}")
    configurable = config.get("configurable")
    if not isinstance(configurable, Mapping):
        raise ConfigError(
            "config['configurable'] is missing or not a dict; expected "
            "{'configurable': {'thread_id': ...}}"
        )
    return configurable


MAX_ID_BYTES = 768
"""The longest id (thread id, namespace, checkpoint id, task id, run id), in bytes of UTF-8
(768 ASCII characters), on every saver. Ids take part in composite primary keys (thread,
namespace and checkpoint id side by side), and PostgreSQL's btree holds at most 2,704 bytes
per index entry: three random ids of 888 bytes each were the most that fit (measured);
768 leaves room for the channel name and version beside two of them in the blob key."""


def check_id(value: Any, what: str) -> str:
    """`value` if it is an id every saver can store and find again: a str of at most
    `MAX_ID_BYTES` bytes of UTF-8, with no NUL and no lone surrogate. Otherwise a
    ConfigError naming `what` (the argument, or the config key)."""
    if type(value) is not str and not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, got {type(value).__name__}: {value!r:.80}")
    if value.isascii():
        if "\x00" in value:
            raise ConfigError(f"{what} contains a NUL character")
        if len(value) > MAX_ID_BYTES:
            raise IdTooLongError(
                f"{what} is {len(value)} bytes long, over the limit of {MAX_ID_BYTES}"
            )
        return value
    if "\x00" in value:
        raise ConfigError(f"{what} contains a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ConfigError(f"{what} is not valid UTF-8 (a lone surrogate)") from exc
    if size > MAX_ID_BYTES:
        raise IdTooLongError(
            f"{what} is {size} bytes long in UTF-8, over the limit of {MAX_ID_BYTES}"
        )
    return value


def check_ids(values: Any, what: str) -> list[str]:
    """A sequence of ids (see `check_id`) as a list. A lone string is refused: iterating
    it would name one id per character."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ConfigError(
            f"{what} must be a list of ids, got {type(values).__name__}: {values!r:.80}"
            + ("; wrap a single id in a list" if isinstance(values, str) else "")
        )
    return [check_id(v, f"{what}[{i}]") for i, v in enumerate(values)]


def check_put_ids(checkpoint: Mapping[str, Any], metadata: Mapping[str, Any]) -> None:
    """The ids a `put` stores besides its config's: the checkpoint's own id, and the run
    id in its metadata (an indexed column)."""
    if not isinstance(checkpoint, Mapping) or "id" not in checkpoint:
        raise ConfigError("put(): checkpoint must be a Checkpoint dict with an 'id'")
    cid = checkpoint["id"]
    if cid == "":
        raise ConfigError("put(): checkpoint['id'] is empty")
    if type(cid) is not str or not cid.isascii() or len(cid) > MAX_ID_BYTES or "\x00" in cid:
        check_id(cid, "checkpoint['id']")
    run_id = metadata.get("run_id") if isinstance(metadata, Mapping) else None
    if isinstance(run_id, str):
        check_id(run_id, "metadata['run_id']")


def _checked_text(key: str, value: str) -> str:
    """Ids end up in database text columns: refuse what no database can store."""
    if value.isascii() and "\x00" not in value and len(value) <= MAX_ID_BYTES:
        return value
    return check_id(value, f"config['configurable']['{key}']")


def thread_id_of(config: Mapping[str, Any]) -> str:
    """The thread a config addresses; a clear error if it names none."""
    value = _configurable(config).get("thread_id")
    if type(value) is str:
        return _checked_text("thread_id", value)
    if value is None:
        raise ConfigError("config['configurable']['thread_id'] is required")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(
            f"config['configurable']['thread_id'] must be a string, got {type(value).__name__}"
        )
    return _checked_text("thread_id", str(value))


def checkpoint_ns_of(config: Mapping[str, Any]) -> str:
    value = _configurable(config).get("checkpoint_ns", "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(
            f"config['configurable']['checkpoint_ns'] must be a string, got {type(value).__name__}"
        )
    return _checked_text("checkpoint_ns", value)


def checkpoint_id_of(config: Mapping[str, Any]) -> str | None:
    """The checkpoint a config addresses, or None for the thread's latest."""
    value = _configurable(config).get("checkpoint_id")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(
            f"config['configurable']['checkpoint_id'] must be a string, got {type(value).__name__}"
        )
    return _checked_text("checkpoint_id", value)


def config_address(config: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """`(thread_id_of, checkpoint_ns_of, checkpoint_id_of)` of `config` in one pass.

    Savers parse a config on every call, and almost every config is a plain dict of ASCII
    strings, which needs none of the checks' branches. Anything else goes through the
    three checks, in that order: the same values, the same errors.
    """
    if type(config) is dict:
        configurable = config.get("configurable")
        if type(configurable) is dict:
            thread_id = configurable.get("thread_id")
            ns = configurable.get("checkpoint_ns", "")
            checkpoint_id = configurable.get("checkpoint_id")
            if type(thread_id) is str and type(ns) is str:
                text: str | None = None
                if checkpoint_id is None:
                    text = thread_id + ns
                elif type(checkpoint_id) is str:
                    text = thread_id + ns + checkpoint_id
                    checkpoint_id = checkpoint_id or None
                if (
                    text is not None
                    and text.isascii()
                    and "\x00" not in text
                    and len(thread_id) <= MAX_ID_BYTES
                    and len(ns) <= MAX_ID_BYTES
                    and (checkpoint_id is None or len(checkpoint_id) <= MAX_ID_BYTES)
                ):
                    return thread_id, ns, checkpoint_id
    return thread_id_of(config), checkpoint_ns_of(config), checkpoint_id_of(config)


def task_path_sort_key(task_path: str, task_id: str, idx: int) -> tuple[str, str, int]:
    """The order live execution applied a superstep's writes in (empty paths first)."""
    return (task_path, task_id, idx)


def write_idx(channel: str, position: int) -> int:
    """Storage index of a write: its position, or the fixed slot of a special channel."""
    return WRITES_IDX_MAP.get(channel, position)


def is_special_batch(channels: list[str]) -> bool:
    """Whether a put_writes batch replaces stored rows instead of inserting if absent."""
    return bool(channels) and WRITES_IDX_MAP.keys() >= set(channels)
