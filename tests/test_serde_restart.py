"""A LangGraph app reads its threads back after a restart, with no allowlist configured.

One interpreter runs `tests/lg_restart_app.py` to write three threads through LangGraph and
`LangGraphSaver(SqliteSaver)` (state with the app's pydantic model, dataclass, enum and
named tuple; one thread whose task raised pydantic's `ValidationError`, one whose task
raised `asyncio.CancelledError`); a second, fresh interpreter imports the app and reads
`get_state` and `get_state_history` of each, then resumes the failed ones. Also with
`LANGGRAPH_STRICT_MSGPACK=true`, and with the app loaded from its file under a path-derived
module name, as LangGraph's Agent Server does (`__src__agent__graph`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "tests" / "lg_restart_app.py"


def _run(command: str, db: Path, env: dict[str, str], module_name: str | None) -> Any:
    args = [sys.executable, str(APP), command, str(db)]
    if module_name is not None:
        args += ["--module-name", module_name]
    result = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _types(described: Any) -> Any:
    if isinstance(described, list):
        return [_types(v) for v in described]
    if isinstance(described, dict) and "type" in described:
        return described["type"]
    if isinstance(described, dict):
        return {k: _types(v) for k, v in described.items()}
    return described


@pytest.mark.parametrize(
    ("strict_env", "module_name"),
    [(False, None), (True, None), (False, "__src__agent__graph"), (True, "__src__agent__graph")],
    ids=["default", "langgraph-strict", "agent-server-name", "agent-server-name-strict"],
)
def test_threads_read_back_after_a_restart(
    tmp_path: Path, strict_env: bool, module_name: str | None
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGGRAPH_", "CHECKPOINTER_"))}
    env["PYTHONPATH"] = str(ROOT)
    if strict_env:
        env["LANGGRAPH_STRICT_MSGPACK"] = "true"
    db = tmp_path / "app.db"
    written = _run("write", db, env, module_name)
    assert written["raised"] == {"validation": "ValidationError", "cancel": "NodeCancelledError"}
    expected_module = module_name or "tests.lg_restart_app"
    assert written["module"] == expected_module

    read = _run("read", db, env, module_name)  # a fresh interpreter, no allowlist
    ok = read["ok"]
    assert ok["next"] == [] and ok["errors"] == {}
    values = _types(ok["values"])
    assert values["profile"] == "Profile" and values["priority"] == "Priority"
    assert values["where"] == "Point" and values["notes"] == ["Note", "Note"]
    assert ok["values"]["profile"]["module"] == expected_module
    assert ok["values"]["answer"] == {
        "type": "TextAccessor",
        "module": ("langchain_core.messages.base"),
        "repr": "'hello ada'",
    }
    assert "Profile(name='ada', age=37)" in ok["values"]["profile"]["repr"]
    assert ok["history"] >= 3 and all(isinstance(h, dict) for h in ok["history_values"])

    failed = read["validation"]
    assert "validate" in failed["next"]
    assert "validation error for Profile" in failed["errors"]["validate"]
    assert _types(failed["values"])["priority"] == "Priority"
    assert failed["after_resume_next"] == []
    assert _types(failed["resumed"])["profile"] == "Profile"

    cancelled = read["cancel"]
    assert "check" in cancelled["next"]
    assert "CancelledError" in cancelled["errors"]["check"]
    assert cancelled["after_resume_next"] == []
    assert _types(cancelled["resumed"])["checked"] == "int"
