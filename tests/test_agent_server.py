"""`checkpointer.agent_server` without a server: the environment it reads, what it opens,
and the shapes of `before` LangGraph's server hands `alist`."""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from checkpointer.agent_server import Settings, checkpointer, open_checkpointer
from checkpointer.errors import ConfigError, DeserializationError
from checkpointer.langgraph import LangGraphSaver, _before_config
from tests.conftest import PG_URL, drop_schema, require_postgres

KEY_A = base64.b64encode(bytes(range(32))).decode()
KEY_B = bytes(range(100, 116)).hex()


# ------------------------------------------------------------------ settings
def test_sqlite_url_and_plain_path() -> None:
    s = Settings.from_env({"CHECKPOINTER_URL": "sqlite:///data/cp.db"})
    assert (s.kind, s.target, s.setup) == ("sqlite", "data/cp.db", True)
    assert Settings.from_env({"CHECKPOINTER_URL": "cp.db"}).target == "cp.db"
    assert s.serializer() is None  # the saver's own default (compressed msgpack)


def test_postgres_options() -> None:
    s = Settings.from_env(
        {
            "CHECKPOINTER_URL": "postgresql://u:secret@db:5433/app",
            "CHECKPOINTER_SCHEMA": "agents",
            "CHECKPOINTER_POOL_MIN_SIZE": "2",
            "CHECKPOINTER_POOL_MAX_SIZE": "20",
            "CHECKPOINTER_PREPARE_THRESHOLD": "none",
            "CHECKPOINTER_SETUP": "false",
            "CHECKPOINTER_ALLOWED_MODULES": "myapp.models, myapp.other ,",
        }
    )
    assert (s.kind, s.schema, s.pool_min_size, s.pool_max_size) == ("postgres", "agents", 2, 20)
    assert s.prepare_threshold is None and s.setup is False
    assert s.allowed_modules == ("myapp.models", "myapp.other")
    assert s.describe() == "PostgreSQL schema 'agents' at host=db port=5433 dbname=app"
    assert "secret" not in repr(s)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, "CHECKPOINTER_URL is not set"),
        ({"CHECKPOINTER_URL": "mysql://x/y"}, "CHECKPOINTER_URL"),
        ({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_SCHEMA": "s"}, "CHECKPOINTER_SCHEMA"),
        ({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_SETUP": "maybe"}, "CHECKPOINTER_SETUP"),
        ({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_BUSY_TIMEOUT": "-1"}, "BUSY_TIMEOUT"),
        ({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_BUSY_TIMEOUT": "nan"}, "BUSY_TIMEOUT"),
        ({"CHECKPOINTER_URL": "postgresql://h/d", "CHECKPOINTER_POOL_MAX_SIZE": "0"}, "MAX_SIZE"),
        ({"CHECKPOINTER_URL": "postgresql://h/d", "CHECKPOINTER_POOL_MAX_SIZE": "x"}, "MAX_SIZE"),
        (
            {
                "CHECKPOINTER_URL": "postgresql://h/d",
                "CHECKPOINTER_POOL_MIN_SIZE": "5",
                "CHECKPOINTER_POOL_MAX_SIZE": "2",
            },
            "below",
        ),
        ({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_ENCRYPTION_KEYS": "nokey"}, "key_id:"),
        ({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_ENCRYPTION_KEYS": "k:!!"}, "'k'"),
        (
            {"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_ENCRYPTION_KEYS": f"k:{KEY_A},k:{KEY_A}"},
            "twice",
        ),
        ({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_ENCRYPTION_ACTIVE_KEY": "k"}, "is empty"),
        (
            {
                "CHECKPOINTER_URL": "cp.db",
                "CHECKPOINTER_ENCRYPTION_KEYS": f"k:{KEY_A}",
                "CHECKPOINTER_ENCRYPTION_ACTIVE_KEY": "other",
            },
            "not among",
        ),
        ({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_ENCRYPTION_ALLOW_PLAINTEXT": "1"}, "only"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        Settings.from_env(env)


def test_a_key_never_shows_in_errors_or_repr() -> None:
    secret = "k:" + base64.b64encode(b"x" * 31).decode() + "@"  # invalid base64
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_ENCRYPTION_KEYS": secret})
    assert secret[2:] not in str(info.value)
    s = Settings.from_env(
        {"CHECKPOINTER_URL": "cp.db", "CHECKPOINTER_ENCRYPTION_KEYS": f"a:{KEY_A}"}
    )
    assert KEY_A not in repr(s) and "encryption_keys" not in repr(s)


def test_encryption_keys_first_one_active() -> None:
    pytest.importorskip("cryptography")
    s = Settings.from_env(
        {
            "CHECKPOINTER_URL": "cp.db",
            "CHECKPOINTER_ENCRYPTION_KEYS": f"new:{KEY_A}, old:hex:{KEY_B}",
        }
    )
    assert s.active_key_id == "new"
    assert s.encryption_keys == {"new": bytes(range(32)), "old": bytes(range(100, 116))}
    serde = s.serializer()
    assert serde is not None and serde.active_key_id == "new"  # type: ignore[attr-defined]


# ------------------------------------------------------------- the saver it opens
async def _round_trip(saver: LangGraphSaver) -> list[Any]:
    """A LangGraph graph run on the saver, then its history read back."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        n: int

    builder = StateGraph(State)
    builder.add_node("inc", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "inc")
    builder.add_edge("inc", END)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t1"}}
    assert (await graph.ainvoke({"n": 1}, config))["n"] == 2
    return [s.values async for s in graph.aget_state_history(config)]


async def test_entry_point_opens_sets_up_and_closes_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHECKPOINTER_URL", f"sqlite:///{tmp_path / 'cp.db'}")
    async with checkpointer() as saver:
        assert isinstance(saver, LangGraphSaver)
        assert await _round_trip(saver) == [{"n": 2}, {"n": 1}, {}]
    # Closed, and the next server start reads what this one wrote.
    async with checkpointer() as saver:
        tup = await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
        assert tup is not None and tup.checkpoint["channel_values"]["n"] == 2


async def test_entry_point_postgres_with_encryption(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cryptography")
    require_postgres()
    schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    env = {
        "CHECKPOINTER_URL": PG_URL,
        "CHECKPOINTER_SCHEMA": schema,
        "CHECKPOINTER_POOL_MAX_SIZE": "2",
        "CHECKPOINTER_ENCRYPTION_KEYS": f"k1:{KEY_A}",
    }
    try:
        async with open_checkpointer(Settings.from_env(env)) as saver:
            assert await _round_trip(saver) == [{"n": 2}, {"n": 1}, {}]
        # The rows hold ciphertext: without the key nothing reads back.
        plain = {k: v for k, v in env.items() if "ENCRYPTION" not in k}
        async with open_checkpointer(Settings.from_env(plain)) as saver:
            with pytest.raises(DeserializationError, match="aesgcm"):
                await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
    finally:
        drop_schema(schema)


async def test_setup_false_refuses_an_empty_database(tmp_path: Path) -> None:
    env = {"CHECKPOINTER_URL": str(tmp_path / "cp.db"), "CHECKPOINTER_SETUP": "0"}
    async with open_checkpointer(Settings.from_env(env)) as saver:
        with pytest.raises(Exception, match=r"(?i)schema|migrat|setup"):
            await saver.aget_tuple({"configurable": {"thread_id": "t1"}})


# --------------------------------------------------------------- before shapes
def test_before_shapes() -> None:
    cid = "1f0a-ck"
    as_config = {"configurable": {"checkpoint_id": cid}}
    assert _before_config(None) is None
    assert _before_config(as_config) is as_config
    assert _before_config(cid) == as_config
    sdk = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid, "checkpoint_map": {}}
    assert _before_config(sdk) == as_config
    with pytest.raises(ConfigError, match="before must be"):
        _before_config({"thread_id": "t"})
    with pytest.raises(ConfigError, match="before must be"):
        _before_config(42)


@pytest.mark.parametrize("shape", ["config", "sdk", "id"])
async def test_alist_before_every_shape(tmp_path: Path, shape: str) -> None:
    env = {"CHECKPOINTER_URL": str(tmp_path / "cp.db")}
    async with open_checkpointer(Settings.from_env(env)) as saver:
        await _round_trip(saver)
        config = {"configurable": {"thread_id": "t1"}}
        every = [t async for t in saver.alist(config)]
        newest = every[0].config["configurable"]
        before: Any = {
            "config": {"configurable": newest},
            "sdk": {**newest, "checkpoint_map": None},
            "id": newest["checkpoint_id"],
        }[shape]
        older = [t async for t in saver.alist(config, before=before)]
        assert [t.config for t in older] == [t.config for t in every[1:]]
        in_thread = await asyncio.to_thread(lambda: list(saver.list(config, before=before)))
        assert [t.config for t in in_thread] == [t.config for t in older]


def test_live_tests_fail_under_ci_when_the_server_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without its packages the live test skips locally and fails under CI=true."""
    from tests import agent_server_harness as harness

    monkeypatch.setattr(harness, "DEPS", (*harness.DEPS, "no_such_agent_server_module"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no_such_agent_server_module"):
        harness.require_agent_server()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no_such_agent_server_module"):
        harness.require_agent_server()
