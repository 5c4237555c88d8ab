"""Starts LangGraph's Agent Server (`langgraph dev`) on the example project in
tests/agent_server_app, with our entry point as its checkpointer, and stops it again.

Every wait is bounded: a server that does not answer, or does not stop, fails the test with
the tail of its log instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest

APP = Path(__file__).parent / "agent_server_app"
DEPS = ("langgraph_api", "langgraph_runtime_inmem", "langgraph_cli", "langgraph_sdk")
START_TIMEOUT = 120.0  # seconds; the machine is shared, start-up is 3-6 s when idle
STOP_TIMEOUT = 60.0
CALL_TIMEOUT = 60.0

T = TypeVar("T")

# Nothing may leave the machine: LangGraph's CLI analytics, its PyPI version check and
# LangSmith tracing are switched off, and any other HTTP(S) attempt goes to a proxy on a
# port nobody listens on (the discard port), so it fails at once instead of reaching out.
OFFLINE_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
    "LANGSMITH_TRACING_V2": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "all_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
SCRUBBED = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "LANGGRAPH_CLOUD_LICENSE_KEY")


def require_agent_server() -> None:
    """Skip when the Agent Server packages are missing; fail under CI=true, where the test
    extra installs them and a missing one is a broken install, not a reason to pass."""
    missing = [name for name in DEPS if importlib.util.find_spec(name) is None]
    if not missing and _langgraph_command() is None:
        missing = ["the `langgraph` command of langgraph-cli"]
    if missing:
        why = f"Agent Server test needs {', '.join(missing)} (pip install -e '.[test]')"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why + " (CI=true: the Agent Server tests must run)")
        pytest.skip(why)


def _langgraph_command() -> str | None:
    beside = Path(sys.executable).parent / "langgraph"
    if beside.exists():
        return str(beside)
    return shutil.which("langgraph")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_project(tmp: Path) -> Path:
    """A private copy of the example project: the server keeps its own records (threads,
    runs, assistants) in `.langgraph_api/` of its working directory."""
    project = tmp / "app"
    shutil.copytree(APP, project, ignore=shutil.ignore_patterns("__pycache__", ".langgraph_api"))
    return project


async def bounded(awaitable: Awaitable[T], timeout: float = CALL_TIMEOUT) -> T:
    """One SDK call, failing the test after `timeout` seconds instead of waiting forever."""
    return await asyncio.wait_for(awaitable, timeout)


class AgentServer:
    """`langgraph dev --no-browser --no-reload` on a free loopback port."""

    def __init__(self, project: Path, env: dict[str, str]) -> None:
        self.project = project
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0
        self.log_path = project / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        from langgraph_sdk import get_client

        return get_client(url=self.url, timeout=CALL_TIMEOUT)

    def start(self) -> AgentServer:
        assert self.proc is None, "already running"
        command = _langgraph_command()
        assert command is not None
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
        env.update(OFFLINE_ENV)
        env.update(self.env)
        self.port = free_port()
        self.starts += 1
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        log.write(f"\n===== start {self.starts} on port {self.port}\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                [
                    command,
                    "dev",
                    "--no-browser",
                    "--no-reload",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                cwd=self.project,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                self.proc = None
                pytest.fail(f"the Agent Server exited during start-up:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=2.0, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.kill()
        pytest.fail(
            f"the Agent Server did not answer within {START_TIMEOUT:.0f} s:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Graceful: SIGINT, as Ctrl-C in a terminal; the server flushes its records and
        leaves our context manager (closing the saver)."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(
                f"the Agent Server did not stop within {STOP_TIMEOUT:.0f} s:\n{self.log_tail()}"
            )
        self.proc = None
        assert code == 0, f"the Agent Server exited with {code}:\n{self.log_tail()}"

    def kill(self) -> None:
        """SIGKILL to the whole process group: a crash, nothing flushed."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")
