"""A ready checkpointer for LangGraph's Agent Server (`langgraph dev`, `langgraph-api`).

One line of `langgraph.json` and one environment variable:

    "checkpointer": {"path": "checkpointer.agent_server.checkpointer"}

    CHECKPOINTER_URL=sqlite:///checkpoints.db        # or postgresql://user@host/db

The server enters `checkpointer()` once per event loop at startup and leaves it at
shutdown: it opens the saver, creates or upgrades the schema, and yields a
`LangGraphSaver`, whose `adelete_for_runs`, `acopy_thread` and `aprune` the server detects
and uses (rollback, thread copy, prune). Everything else is read from the environment
(see `Settings.from_env`), so one project runs against SQLite on a laptop and Postgres in a
deployment without an edit.

The server's loader splits a module path at its last dot, so the dotted form above is the
one that works; `"checkpointer.agent_server:checkpointer"` is not found by langgraph-api
0.16.7. A file path (`"./my_checkpointer.py:checkpointer"`) re-exporting it works too.
"""

from __future__ import annotations

import base64
import binascii
import copy
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from checkpointer.errors import ConfigError, DeserializationError, SerializationError
from checkpointer.langgraph import LangGraphSaver
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.savers.postgres import DEFAULT_PREPARE_THRESHOLD
from checkpointer.savers.sql.migration import parse_url
from checkpointer.serde import Serializer

__all__ = ["ENV", "Settings", "checkpointer", "open_checkpointer", "restore_threads"]

logger = logging.getLogger(__name__)

# The environment variables, in one place (the README's table lists the same).
ENV = {
    "url": "CHECKPOINTER_URL",
    "schema": "CHECKPOINTER_SCHEMA",
    "setup": "CHECKPOINTER_SETUP",
    "pool_min_size": "CHECKPOINTER_POOL_MIN_SIZE",
    "pool_max_size": "CHECKPOINTER_POOL_MAX_SIZE",
    "prepare_threshold": "CHECKPOINTER_PREPARE_THRESHOLD",
    "busy_timeout": "CHECKPOINTER_BUSY_TIMEOUT",
    "encryption_keys": "CHECKPOINTER_ENCRYPTION_KEYS",
    "active_key": "CHECKPOINTER_ENCRYPTION_ACTIVE_KEY",
    "allow_plaintext": "CHECKPOINTER_ENCRYPTION_ALLOW_PLAINTEXT",
    "allowed_modules": "CHECKPOINTER_ALLOWED_MODULES",
}

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def _flag(environ: Mapping[str, str], key: str, default: bool) -> bool:
    name = ENV[key]
    raw = environ.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false (1/0, yes/no, on/off), got {raw!r}")


def _number(environ: Mapping[str, str], key: str, default: int, *, minimum: int) -> int:
    name = ENV[key]
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def _seconds(environ: Mapping[str, str], key: str, default: float) -> float:
    name = ENV[key]
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not value >= 0:  # also refuses NaN
        raise ConfigError(f"{name} must be zero or more seconds, got {raw!r}")
    return value


def _prepare_threshold(environ: Mapping[str, str]) -> int | None:
    """`none` (or `off`) switches server-side prepared statements off, for PgBouncer in
    transaction mode."""
    raw = environ.get(ENV["prepare_threshold"], "").strip().lower()
    if raw in ("none", "off", "disable", "disabled"):
        return None
    return _number(environ, "prepare_threshold", DEFAULT_PREPARE_THRESHOLD, minimum=0)


def _key_bytes(name: str, key_id: str, text: str) -> bytes:
    """A key as base64 (standard or URL-safe alphabet, padding optional) or `hex:...`."""
    text = text.strip()
    try:
        if text.startswith("hex:"):
            return bytes.fromhex(text[4:])
        padded = text + "=" * (-len(text) % 4)
        return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (ValueError, binascii.Error):
        raise ConfigError(
            f"{name}: key {key_id!r} is neither base64 nor hex:... (never shown here)"
        ) from None


def _encryption_keys(environ: Mapping[str, str]) -> dict[str, bytes]:
    """`CHECKPOINTER_ENCRYPTION_KEYS="new:BASE64,old:BASE64"`: key id, colon, key."""
    name = ENV["encryption_keys"]
    raw = environ.get(name, "").strip()
    keys: dict[str, bytes] = {}
    if not raw:
        return keys
    for item in raw.split(","):
        if not item.strip():
            continue
        key_id, sep, text = item.strip().partition(":")
        if not sep or not key_id.strip():
            raise ConfigError(f"{name} must list key_id:base64key pairs separated by commas")
        key_id = key_id.strip()
        if key_id in keys:
            raise ConfigError(f"{name} lists key id {key_id!r} twice")
        keys[key_id] = _key_bytes(name, key_id, text)
    return keys


@dataclass(frozen=True)
class Settings:
    """What `checkpointer()` opens, as read from the environment."""

    url: str = field(repr=False)  # may hold a password: never in a repr or a log
    kind: str  # "sqlite" or "postgres"
    target: str = field(repr=False)  # a SQLite path, or the PostgreSQL URL
    schema: str = "public"
    setup: bool = True
    pool_min_size: int = 1
    pool_max_size: int = 10
    prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD
    busy_timeout: float = 5.0
    encryption_keys: dict[str, bytes] = field(default_factory=dict, repr=False)
    active_key_id: str | None = None
    allow_plaintext: bool = False
    allowed_modules: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read and check every variable; a bad one raises `ConfigError` naming it."""
        env = os.environ if environ is None else environ
        url = env.get(ENV["url"], "").strip()
        if not url:
            raise ConfigError(
                f"{ENV['url']} is not set: give a SQLite path, sqlite:///path or a "
                "postgresql:// URL for the Agent Server's checkpoints"
            )
        try:
            kind, target = parse_url(url)
        except ValueError as exc:
            raise ConfigError(f"{ENV['url']}: {exc}") from None
        schema = env.get(ENV["schema"], "").strip() or "public"
        if kind == "sqlite" and env.get(ENV["schema"], "").strip():
            raise ConfigError(f"{ENV['schema']} applies to PostgreSQL only; {ENV['url']} is SQLite")
        min_size = _number(env, "pool_min_size", 1, minimum=0)
        max_size = _number(env, "pool_max_size", max(10, min_size), minimum=1)
        if max_size < min_size:
            raise ConfigError(
                f"{ENV['pool_max_size']} ({max_size}) is below {ENV['pool_min_size']} ({min_size})"
            )
        keys = _encryption_keys(env)
        active = env.get(ENV["active_key"], "").strip() or None
        if active is not None and not keys:
            raise ConfigError(f"{ENV['active_key']} is set but {ENV['encryption_keys']} is empty")
        if keys and active is None:
            active = next(iter(keys))  # the first listed key encrypts new values
        if active is not None and active not in keys:
            raise ConfigError(
                f"{ENV['active_key']} {active!r} is not among the key ids in "
                f"{ENV['encryption_keys']}: {sorted(keys)}"
            )
        allow_plaintext = _flag(env, "allow_plaintext", False)
        if allow_plaintext and not keys:
            raise ConfigError(
                f"{ENV['allow_plaintext']} only applies with {ENV['encryption_keys']} set"
            )
        modules = tuple(
            m.strip() for m in env.get(ENV["allowed_modules"], "").split(",") if m.strip()
        )
        return cls(
            url=url,
            kind=kind,
            target=target,
            schema=schema,
            setup=_flag(env, "setup", True),
            pool_min_size=min_size,
            pool_max_size=max_size,
            prepare_threshold=_prepare_threshold(env),
            busy_timeout=_seconds(env, "busy_timeout", 5.0),
            encryption_keys=keys,
            active_key_id=active,
            allow_plaintext=allow_plaintext,
            allowed_modules=modules,
        )

    def serializer(self) -> Serializer | None:
        """The encrypting serializer when keys are given (compression inside it, as the
        SQL savers compress by default), else None: the saver's own default."""
        if not self.encryption_keys:
            return None
        from checkpointer.serde.compression import database_default_serializer
        from checkpointer.serde.encryption import EncryptedSerializer

        assert self.active_key_id is not None
        return EncryptedSerializer(
            database_default_serializer(),
            keys=self.encryption_keys,
            active_key_id=self.active_key_id,
            allow_plaintext=self.allow_plaintext,
        )

    def describe(self) -> str:
        """Where the checkpoints live, for the startup log (never a password)."""
        if self.kind == "sqlite":
            memory = self.target == ":memory:"
            return f"SQLite {self.target if memory else os.path.abspath(self.target)}"
        from checkpointer.savers.sql.pg_faults import location

        at = location(self.target)
        return f"PostgreSQL schema {self.schema!r}{f' at {at}' if at else ''}"


@asynccontextmanager
async def _open_saver(settings: Settings) -> AsyncIterator[BaseCheckpointSaver]:
    serde = settings.serializer()
    if settings.kind == "sqlite":
        from checkpointer.savers.sqlite import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(
            settings.target, setup=settings.setup, serde=serde, busy_timeout=settings.busy_timeout
        ) as sqlite_saver:
            yield sqlite_saver
        return
    from checkpointer.savers.postgres import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(
        settings.target,
        setup=settings.setup,
        serde=serde,
        schema=settings.schema,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        prepare_threshold=settings.prepare_threshold,
    ) as pg_saver:
        yield pg_saver


@asynccontextmanager
async def open_checkpointer(settings: Settings | None = None) -> AsyncIterator[LangGraphSaver]:
    """The saver `settings` (default: the environment) describe, opened, set up and
    wrapped for LangGraph; closed on exit."""
    settings = Settings.from_env() if settings is None else settings
    async with _open_saver(settings) as saver:
        logger.info("checkpointer: checkpoints in %s", settings.describe())
        yield LangGraphSaver(saver, allowed_modules=settings.allowed_modules)


def checkpointer() -> Any:
    """The Agent Server's entry point (`"checkpointer": {"path":
    "checkpointer.agent_server.checkpointer"}`): an async context manager yielding the
    `LangGraphSaver` that `CHECKPOINTER_URL` and the other `CHECKPOINTER_*` variables
    describe. The server calls it, enters the result, and exits it at shutdown."""
    return open_checkpointer()


class _ValuesSkipped:
    """A read-only serializer that loads what it can and gives None for the rest: reading
    metadata must not depend on the graph's classes being importable in this process."""

    def __init__(self, inner: Serializer) -> None:
        self.inner = inner

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        raise SerializationError("restore_threads reads only; it never writes values")

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        try:
            return self.inner.loads_typed(data)
        except (DeserializationError, ImportError):
            return None


def _metadata_reader(saver: BaseCheckpointSaver) -> BaseCheckpointSaver:
    """A shallow clone of `saver` (same connections) reading checkpoints for their
    metadata, whatever their values."""
    clone = copy.copy(saver)
    clone.serde = _ValuesSkipped(saver.serde)
    return clone


async def restore_threads(client: Any, saver: Any, *, page_size: int = 500) -> list[str]:
    """Re-create the Agent Server's thread records that our database outlived; returns
    the ids re-created.

    The in-memory runtime of `langgraph dev` keeps its thread and run records in its own
    file, flushed every 10 s, and discards that whole file at start-up when it cannot
    unpickle it (a thread's last values holding a class of a graph module it has not
    loaded yet). Checkpoints stay in our database either way. For every thread there that
    the server does not know, this creates the record again under the same id and graph
    (the `graph_id` the server writes into each checkpoint's metadata), after which its
    state, history and pending interrupts read back and runs resume. Threads whose
    checkpoints name no graph are left alone.

    `client` is a `langgraph_sdk` async client; `saver` one of our savers (or a
    `LangGraphSaver`) on the server's database.
    """
    from langgraph_sdk.errors import NotFoundError

    inner = _metadata_reader(saver.saver if isinstance(saver, LangGraphSaver) else saver)
    restored: list[str] = []
    offset = 0
    while True:
        summaries = await inner.alist_threads(
            sort="id", descending=False, limit=page_size, offset=offset
        )
        for summary in summaries:
            thread_id = summary.thread_id
            try:
                await client.threads.get(thread_id)
                continue
            except NotFoundError:
                pass
            graph_id = None
            root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            async for tup in inner.alist(root, limit=1):
                graph_id = tup.metadata.get("graph_id")
            if not isinstance(graph_id, str):
                logger.warning("checkpointer: thread %s names no graph; not restored", thread_id)
                continue
            await client.threads.create(
                thread_id=thread_id, graph_id=graph_id, if_exists="do_nothing"
            )
            restored.append(thread_id)
        if len(summaries) < page_size:
            return restored
        offset += page_size
