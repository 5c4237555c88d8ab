"""LangGraph's Agent Server (`langgraph dev`) with `checkpointer.agent_server` as its
checkpointer, on SQLite and on PostgreSQL, driven through `langgraph_sdk` as an app would.

The example project is tests/agent_server_app (its langgraph.json names our entry point).
Each backend gets one server for the scenario tests; the restart and crash tests start their
own. Marked `agent_server`; skipped without the packages, failed under CI=true.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent_server_harness import AgentServer, bounded, make_project, require_agent_server
from tests.conftest import PG_URL, drop_schema, require_postgres

pytestmark = [pytest.mark.agent_server, pytest.mark.slow]

BACKENDS = ("sqlite", "postgres")


def _backend_env(backend: str, project: Path) -> tuple[dict[str, str], str | None]:
    """The environment selecting `backend`, and the PostgreSQL schema to drop afterwards."""
    if backend == "sqlite":
        # A relative path: the server resolves it against its working directory.
        return {"CHECKPOINTER_URL": "sqlite:///checkpoints.db"}, None
    require_postgres()
    schema = f"cp_as_{uuid.uuid4().hex[:12]}"
    return {
        "CHECKPOINTER_URL": PG_URL,
        "CHECKPOINTER_SCHEMA": schema,
        "CHECKPOINTER_POOL_MAX_SIZE": "4",
    }, schema


class Deployment:
    """A server and direct access to the database behind it (to check rows ourselves)."""

    def __init__(self, backend: str, tmp: Path) -> None:
        require_agent_server()
        self.backend = backend
        self.project = make_project(tmp)
        self.env, self.schema = _backend_env(backend, self.project)
        self.server = AgentServer(self.project, self.env)

    def close(self) -> None:
        try:
            if self.server.proc is not None:
                self.server.stop()
        finally:
            if self.schema is not None:
                drop_schema(self.schema)

    def saver(self) -> Any:
        """Our own saver on the server's database (sync; the test reads, never writes)."""
        if self.backend == "sqlite":
            from checkpointer.savers.sqlite import SqliteSaver

            return SqliteSaver.from_conn_string(self.project / "checkpoints.db")
        from checkpointer.savers.postgres import PostgresSaver

        return PostgresSaver.from_conn_string(PG_URL, schema=self.schema, max_size=2)

    def stored_checkpoints(self, thread_id: str) -> list[dict[str, Any]]:
        """(namespace, id, run_id) of every checkpoint of the thread in the database."""
        from checkpointer.langgraph import LangGraphSaver

        with self.saver() as saver:
            wrapped = LangGraphSaver(saver)  # loads what LangGraph stores (interrupts, ...)
            # No checkpoint_ns in the config: every namespace of the thread.
            return [
                {
                    "ns": tup.config["configurable"]["checkpoint_ns"],
                    "id": tup.config["configurable"]["checkpoint_id"],
                    "run_id": tup.metadata.get("run_id"),
                }
                for tup in wrapped.list({"configurable": {"thread_id": thread_id}})
            ]


@pytest.fixture(scope="module", params=BACKENDS)
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    dep = Deployment(request.param, tmp_path_factory.mktemp(f"agent-server-{request.param}"))
    try:
        dep.server.start()
        yield dep
    finally:
        dep.close()


@pytest.fixture
async def client(deployment: Deployment) -> AsyncIterator[Any]:
    c = deployment.server.client()
    try:
        yield c
    finally:
        await c.http.client.aclose()


# ----------------------------------------------------------------------- helpers
async def new_thread(client: Any, graph_id: str) -> str:
    thread = await bounded(client.threads.create(graph_id=graph_id))
    return str(thread["thread_id"])


async def wait_run(client: Any, thread_id: str, graph_id: str, **kwargs: Any) -> Any:
    return await bounded(client.runs.wait(thread_id, graph_id, raise_error=True, **kwargs))


async def history(client: Any, thread_id: str, **kwargs: Any) -> list[dict[str, Any]]:
    return list(await bounded(client.threads.get_history(thread_id, limit=200, **kwargs)))


def ids(states: list[dict[str, Any]]) -> list[str]:
    return [s["checkpoint"]["checkpoint_id"] for s in states]


async def until(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    """Poll an async predicate until it returns something truthy (bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await bounded(predicate())
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)


async def run_to_interrupt(client: Any, topic: str = "cats") -> str:
    thread_id = await new_thread(client, "approval")
    out = await wait_run(client, thread_id, "approval", input={"topic": topic})
    assert out["messages"] == [f"draft about {topic}"]
    return thread_id


def resume(value: str) -> Any:
    from langgraph_sdk.schema import Command

    return Command(resume=value)


async def run_written(client: Any, thread_id: str, run_id: str) -> bool:
    """Whether the run has saved a checkpoint yet (the server adds run_id to metadata)."""
    return any(s["metadata"].get("run_id") == run_id for s in await history(client, thread_id))


# --------------------------------------------------------------------- scenarios
async def test_startup_reports_every_capability(deployment: Deployment) -> None:
    log = deployment.server.log_text()
    assert "Using custom checkpointer: LangGraphSaver" in log
    assert "Custom checkpointer missing" not in log, log
    where = "SQLite" if deployment.backend == "sqlite" else f"schema '{deployment.schema}'"
    assert where in log


async def test_interrupt_resume_and_history(deployment: Deployment, client: Any) -> None:
    thread_id = await run_to_interrupt(client)
    state = await bounded(client.threads.get_state(thread_id))
    assert state["next"] == ["ask"]
    assert [i["value"] for i in state["interrupts"]] == [
        {"question": "approve?", "draft": "draft about cats"}
    ]
    first_run = state["metadata"]["run_id"]

    out = await wait_run(client, thread_id, "approval", command=resume("yes"))
    assert out["decision"] == "yes"
    assert out["messages"] == ["draft about cats", "human: yes", "done: yes"]  # a DeltaChannel

    states = await history(client, thread_id)
    assert [s["metadata"]["step"] for s in states] == [3, 2, 1, 0, -1]
    assert states[0]["values"]["messages"] == out["messages"]
    # Metadata the server adds to each run's checkpoints is kept, as LangGraph's savers keep it.
    meta = states[0]["metadata"]
    assert meta["graph_id"] == "approval" and meta["thread_id"] == thread_id
    assert meta["assistant_id"] and meta["run_id"] and meta["run_id"] != first_run

    # `before` as the SDK sends it: the checkpoint dict of a state it returned.
    older = await history(client, thread_id, before=states[1]["checkpoint"])
    assert ids(older) == ids(states[2:])
    assert [s["values"] for s in older] == [s["values"] for s in states[2:]]
    # Filtered by what the server stored: source, and the first run's id.
    loops = await history(client, thread_id, metadata={"source": "loop"})
    assert ids(loops) == [
        s["checkpoint"]["checkpoint_id"] for s in states if s["metadata"]["source"] == "loop"
    ]
    by_run = await history(client, thread_id, metadata={"run_id": first_run})
    assert by_run and all(s["metadata"]["run_id"] == first_run for s in by_run)
    assert set(ids(by_run)) < set(ids(states))


async def test_update_state_and_fork(deployment: Deployment, client: Any) -> None:
    thread_id = await run_to_interrupt(client, "cats")
    paused = await bounded(client.threads.get_state(thread_id))

    # update_state on the latest checkpoint, then resume: the update is seen.
    await bounded(client.threads.update_state(thread_id, {"topic": "dogs"}))
    updated = await bounded(client.threads.get_state(thread_id))
    assert updated["values"]["topic"] == "dogs" and updated["next"] == ["ask"]
    assert updated["metadata"]["source"] == "update"
    assert updated["parent_checkpoint"]["checkpoint_id"] == paused["checkpoint"]["checkpoint_id"]
    out = await wait_run(client, thread_id, "approval", command=resume("yes"))
    assert out["topic"] == "dogs" and out["decision"] == "yes"

    # Fork: resume differently from the paused checkpoint (before the update).
    forked = await wait_run(
        client,
        thread_id,
        "approval",
        command=resume("no"),
        checkpoint_id=paused["checkpoint"]["checkpoint_id"],
    )
    assert forked["topic"] == "cats" and forked["decision"] == "no"
    assert forked["messages"] == ["draft about cats", "human: no", "done: no"]
    latest = await bounded(client.threads.get_state(thread_id))
    assert latest["values"] == forked

    # Both branches stay in the history; the old branch still reads back whole.
    states = await history(client, thread_id)
    decisions = {s["values"].get("decision") for s in states}
    assert {"yes", "no"} <= decisions
    old = await bounded(client.threads.get_state(thread_id, checkpoint_id=ids(states)[-1]))
    assert old["metadata"]["step"] == -1

    # update_state addressed to an old checkpoint forks from there.
    await bounded(
        client.threads.update_state(
            thread_id, {"topic": "birds"}, checkpoint_id=paused["checkpoint"]["checkpoint_id"]
        )
    )
    branch = await bounded(client.threads.get_state(thread_id))
    assert branch["values"]["topic"] == "birds" and branch["next"] == ["ask"]
    assert branch["values"]["messages"] == ["draft about cats"]


async def test_copy_then_delete_the_source(deployment: Deployment, client: Any) -> None:
    thread_id = await run_to_interrupt(client, "fish")
    await wait_run(client, thread_id, "approval", command=resume("ok"))
    source_states = await history(client, thread_id)

    copy = await bounded(client.threads.copy(thread_id))
    copy_id = str(copy["thread_id"])
    copied = await history(client, copy_id)
    assert [s["values"] for s in copied] == [s["values"] for s in source_states]
    assert [s["next"] for s in copied] == [s["next"] for s in source_states]
    assert len(deployment.stored_checkpoints(copy_id)) == len(source_states)

    # The copy goes on by itself; deleting the source leaves it whole.
    await bounded(client.threads.delete(thread_id))
    from langgraph_sdk.errors import NotFoundError

    with pytest.raises(NotFoundError):
        await bounded(client.threads.get(thread_id))
    assert deployment.stored_checkpoints(thread_id) == []
    assert len(await history(client, copy_id)) == len(source_states)
    out = await wait_run(client, copy_id, "approval", input={"topic": "again"})
    assert out["messages"][-1] == "draft about again"


async def test_prune_delete(deployment: Deployment, client: Any) -> None:
    thread_id = await run_to_interrupt(client)
    assert deployment.stored_checkpoints(thread_id)
    result = await bounded(client.threads.prune([thread_id], strategy="delete"))
    assert result["pruned_count"] == 1
    assert deployment.stored_checkpoints(thread_id) == []


async def test_multitask_rollback(deployment: Deployment, client: Any) -> None:
    thread_id = await new_thread(client, "slow")
    await wait_run(client, thread_id, "slow", input={"sleep": 0})
    before = await history(client, thread_id)

    slow = await bounded(client.runs.create(thread_id, "slow", input={"sleep": 45}))
    await until(lambda: run_written(client, thread_id, slow["run_id"]), "the slow run's first step")
    fresh = await bounded(
        client.runs.create(thread_id, "slow", input={"sleep": 0}, multitask_strategy="rollback")
    )
    await bounded(client.runs.join(thread_id, fresh["run_id"]))

    from langgraph_sdk.errors import NotFoundError

    with pytest.raises(NotFoundError):
        await bounded(client.runs.get(thread_id, slow["run_id"]))
    stored = deployment.stored_checkpoints(thread_id)
    assert stored and all(c["run_id"] != slow["run_id"] for c in stored)
    state = await bounded(client.threads.get_state(thread_id))
    assert state["values"]["log"] == ["start 0", "waited 0", "start 0", "waited 0"]
    assert set(ids(before)) < {c["id"] for c in stored}


async def test_cancel_with_rollback(deployment: Deployment, client: Any) -> None:
    thread_id = await new_thread(client, "slow")
    await wait_run(client, thread_id, "slow", input={"sleep": 0})
    before = await history(client, thread_id)

    slow = await bounded(client.runs.create(thread_id, "slow", input={"sleep": 45}))
    await until(lambda: run_written(client, thread_id, slow["run_id"]), "the slow run's first step")
    await bounded(client.runs.cancel(thread_id, slow["run_id"], wait=True, action="rollback"))

    stored = deployment.stored_checkpoints(thread_id)
    assert sorted(c["id"] for c in stored) == sorted(ids(before))
    state = await bounded(client.threads.get_state(thread_id))
    assert state["values"]["log"] == ["start 0", "waited 0"]
    assert ids(await history(client, thread_id)) == ids(before)


async def test_subgraph_interrupt(deployment: Deployment, client: Any) -> None:
    thread_id = await new_thread(client, "nested")
    await wait_run(client, thread_id, "nested", input={"log": []})
    state = await bounded(client.threads.get_state(thread_id, subgraphs=True))
    assert state["next"] == ["child"]
    (task,) = state["tasks"]
    assert [i["value"] for i in task["interrupts"]] == ["inner question"]
    child = task["state"]
    assert child["next"] == ["inner_ask"]
    assert child["values"]["log"] == ["outer before", "inner prep"]
    namespaces = {c["ns"] for c in deployment.stored_checkpoints(thread_id)}
    assert any(ns.startswith("child:") for ns in namespaces), namespaces

    out = await wait_run(client, thread_id, "nested", command=resume("42"))
    assert out["log"] == [
        "outer before",
        "outer before",
        "inner prep",
        "inner got 42",
        "outer after",
    ]


async def test_dataclass_and_pydantic_state(deployment: Deployment, client: Any) -> None:
    thread_id = await new_thread(client, "typed")
    out = await wait_run(client, thread_id, "typed", input={"name": "bo"})
    expected = {
        "name": "bo",
        "note": {"text": "hello bo!", "stars": 6},
        "profile": {"name": "bo", "tags": ["a", "b"]},
    }
    assert out == expected
    state = await bounded(client.threads.get_state(thread_id))
    assert state["values"] == expected
    states = await history(client, thread_id)
    assert states[1]["values"]["note"] == {"text": "hello bo", "stars": 5}
    again = await wait_run(client, thread_id, "typed", input={"name": "cy"})
    assert again["note"] == {"text": "hello cy!", "stars": 6}


# ------------------------------------------------------------ restart and crash
async def snapshot(client: Any) -> dict[str, Any]:
    """Everything a client can read about every thread: its record's metadata, its state
    (with subgraph states) and its whole history."""
    out: dict[str, Any] = {}
    for thread in await bounded(client.threads.search(limit=100)):
        thread_id = str(thread["thread_id"])
        out[thread_id] = {
            "metadata": thread["metadata"],
            "state": await bounded(client.threads.get_state(thread_id, subgraphs=True)),
            "history": await history(client, thread_id),
        }
    return out


async def fill(client: Any) -> dict[str, str]:
    """One thread per kind of state a restart must keep."""
    paused = await run_to_interrupt(client, "paused")
    forked = await run_to_interrupt(client, "forked")
    at_pause = await bounded(client.threads.get_state(forked))
    await bounded(client.threads.update_state(forked, {"topic": "updated"}))
    await wait_run(client, forked, "approval", command=resume("yes"))
    await wait_run(
        client,
        forked,
        "approval",
        command=resume("no"),
        checkpoint_id=at_pause["checkpoint"]["checkpoint_id"],
    )
    copied = str((await bounded(client.threads.copy(forked)))["thread_id"])
    nested = await new_thread(client, "nested")
    await wait_run(client, nested, "nested", input={"log": []})
    slow = await new_thread(client, "slow")
    await wait_run(client, slow, "slow", input={"sleep": 0})
    return {"paused": paused, "forked": forked, "copied": copied, "nested": nested, "slow": slow}


@pytest.fixture(params=BACKENDS)
def own_deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    dep = Deployment(request.param, tmp_path)
    try:
        yield dep
    finally:
        dep.close()


async def test_graceful_restart_keeps_every_thread(own_deployment: Deployment) -> None:
    server = own_deployment.server.start()
    client = server.client()
    threads = await fill(client)
    before = await snapshot(client)
    assert set(threads.values()) <= set(before)
    await client.http.client.aclose()

    server.restart()
    client = server.client()
    try:
        after = await snapshot(client)
        assert after == before
        # And they go on: the paused thread and the paused subgraph resume.
        out = await wait_run(client, threads["paused"], "approval", command=resume("later"))
        assert out["messages"] == ["draft about paused", "human: later", "done: later"]
        out = await wait_run(client, threads["nested"], "nested", command=resume("7"))
        assert out["log"][-2:] == ["inner got 7", "outer after"]
    finally:
        await client.http.client.aclose()


async def test_checkpoints_outlive_a_killed_server(own_deployment: Deployment) -> None:
    """SIGKILL right after a thread is made: our database has its checkpoints whatever the
    server's own records kept (it flushes them every 10 s), and re-creating the thread
    record with the same id and graph brings the state back."""
    server = own_deployment.server.start()
    client = server.client()
    try:
        thread_id = await run_to_interrupt(client, "crash")
        before = await history(client, thread_id)
    finally:
        await client.http.client.aclose()
    server.kill()
    assert {c["id"] for c in own_deployment.stored_checkpoints(thread_id)} == set(ids(before))

    server.start()
    client = server.client()
    try:
        from checkpointer.agent_server import restore_threads

        with own_deployment.saver() as saver:
            restored = await bounded(restore_threads(client, saver))
        # Lost or not (the usual outcome is lost: its record was not flushed yet), the
        # thread is there again with its whole history, and resumes.
        assert set(restored) <= {thread_id}
        assert ids(await history(client, thread_id)) == ids(before)
        out = await wait_run(client, thread_id, "approval", command=resume("after crash"))
        assert out["decision"] == "after crash"
        with own_deployment.saver() as saver:
            assert await bounded(restore_threads(client, saver)) == []
    finally:
        await client.http.client.aclose()


async def test_restart_with_app_classes_in_state(own_deployment: Deployment) -> None:
    """A thread whose values hold the graph module's own classes: the server pickles them
    into its records file and, at the next start, cannot unpickle it before the graph
    module is loaded, so it discards every record. Our database keeps every checkpoint and
    `restore_threads` brings each thread back whole."""
    own_deployment.server.env["CHECKPOINTER_ALLOWED_MODULES"] = "__src__agent__graph"
    server = own_deployment.server.start()
    client = server.client()
    try:
        typed = await new_thread(client, "typed")
        await wait_run(client, typed, "typed", input={"name": "bo"})
        paused = await run_to_interrupt(client, "kept")
        before = {t: await history(client, t) for t in (typed, paused)}
    finally:
        await client.http.client.aclose()

    server.restart()
    client = server.client()
    try:
        from checkpointer.agent_server import restore_threads

        with own_deployment.saver() as saver:
            restored = await bounded(restore_threads(client, saver))
        assert set(restored) <= set(before)  # all of them, with 0.16.7's records file
        for thread_id, states in before.items():
            assert await history(client, thread_id) == states
        out = await wait_run(client, paused, "approval", command=resume("yes"))
        assert out["decision"] == "yes"
        again = await wait_run(client, typed, "typed", input={"name": "cy"})
        assert again["note"] == {"text": "hello cy!", "stars": 6}
    finally:
        await client.http.client.aclose()
