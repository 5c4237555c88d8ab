"""The Agent Server with our entry point against LangGraph's AsyncSqliteSaver as its custom
checkpointer: `threads.copy` time on a 50-checkpoint thread, multitask rollback and
cancel(action="rollback"). Starts `langgraph dev` on the test app (tests/agent_server_app).

    python -m benchmarks.agent_server_compare ours langgraph
"""

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from langgraph_sdk.schema import Command

from tests.agent_server_harness import AgentServer, make_project

LG = """
from contextlib import asynccontextmanager
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
@asynccontextmanager
async def checkpointer():
    async with AsyncSqliteSaver.from_conn_string("lg.db") as saver:
        await saver.setup()
        yield saver
"""


async def measure(kind: str):
    proj = make_project(Path(tempfile.mkdtemp()))
    if kind == "langgraph":
        (proj / "lg_saver.py").write_text(LG)
        cfg = json.loads((proj / "langgraph.json").read_text())
        cfg["checkpointer"] = {"path": "./lg_saver.py:checkpointer"}
        (proj / "langgraph.json").write_text(json.dumps(cfg))
    s = AgentServer(proj, {"CHECKPOINTER_URL": "sqlite:///checkpoints.db"}).start()
    c = s.client()
    try:
        t = (await c.threads.create(graph_id="approval"))["thread_id"]
        for i in range(10):
            await c.runs.wait(t, "approval", input={"topic": str(i)})
            await c.runs.wait(t, "approval", command=Command(resume="ok"))
        n = len(await c.threads.get_history(t, limit=1000))
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            await c.threads.copy(t)
            times.append(time.perf_counter() - t0)
        print(
            f"{kind}: copy of a {n}-checkpoint thread: "
            f"median {statistics.median(times) * 1000:.0f} ms "
            f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}) over {len(times)}"
        )
        # cancel(action="rollback") first: LangGraph's saver does not survive the other
        t = (await c.threads.create(graph_id="slow"))["thread_id"]
        await c.runs.wait(t, "slow", input={"sleep": 0})
        n0 = len(await c.threads.get_history(t, limit=1000))
        slow = await c.runs.create(t, "slow", input={"sleep": 20})
        await asyncio.sleep(3)
        try:
            await asyncio.wait_for(
                c.runs.cancel(t, slow["run_id"], wait=True, action="rollback"), 60
            )
            h = await c.threads.get_history(t, limit=1000)
            print(
                f"{kind}: cancel(rollback) -> {len(h)} checkpoints (had {n0} before the run); "
                f"log {h[0]['values'].get('log')}"
            )
        except Exception as e:
            print(f"{kind}: cancel(rollback) -> {type(e).__name__}: {str(e)[:200]}")
        # multitask_strategy="rollback"
        t = (await c.threads.create(graph_id="slow"))["thread_id"]
        await c.runs.wait(t, "slow", input={"sleep": 0})
        slow = await c.runs.create(t, "slow", input={"sleep": 20})
        await asyncio.sleep(3)
        try:
            fresh = await c.runs.create(
                t, "slow", input={"sleep": 0}, multitask_strategy="rollback"
            )
            await asyncio.wait_for(c.runs.join(t, fresh["run_id"]), 60)
            st = await c.threads.get_state(t)
            print(f"{kind}: multitask rollback -> log {st['values'].get('log')}")
        except Exception as e:
            print(f"{kind}: multitask rollback -> {type(e).__name__}: {str(e)[:200]}")
    finally:
        await c.http.client.aclose()
        s.stop() if s.proc and s.proc.poll() is None else s.kill()
    log = s.log_text()
    for line in log.splitlines():
        if "missing" in line.lower() and "checkpointer" in line.lower():
            print("   log:", line[:160])


async def main():
    for kind in sys.argv[1:]:
        await measure(kind)


asyncio.run(main())
