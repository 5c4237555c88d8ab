"""The code stays ruff- and mypy-clean: checked with the rest of the suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = [d for d in ("checkpointer", "tests", "benchmarks", "conformance") if (ROOT / d).is_dir()]


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None and not (Path(sys.executable).parent / name).exists():
        pytest.fail(f"{name} is not installed; install the test extra: pip install -e '.[test]'")
    return [sys.executable, "-m", name]


def test_ruff_lint() -> None:
    result = subprocess.run(
        [*_tool("ruff"), "check", *CODE],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = subprocess.run(
        [*_tool("ruff"), "format", "--check", *CODE],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = subprocess.run([*_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
