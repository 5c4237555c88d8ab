"""The CLI in a real terminal 80 columns wide (a pty): `threads`, `history` and `show` on
the demo database lay out their tables so that no column header is cut to an ellipsis,
and no line is wider than the terminal; long output goes through the pager."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
BIN = [sys.executable, "-c", "from checkpointer.cli import main; main()"]


def _in_pty(
    args: list[str], cols: int = 80, rows: int = 24, env: dict[str, str] | None = None
) -> str:
    """Run the CLI with its stdout on a pty of `cols` x `rows`; the text it printed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    environment.update(TERM="xterm-256color", **(env or {}))
    proc = subprocess.Popen(
        [*BIN, *args], stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=environment
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    return ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r", "")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    path = str(tmp_path_factory.mktemp("term") / "demo.db")
    subprocess.run([*BIN, "demo", "--db", path], check=True, capture_output=True)
    out = subprocess.run(
        [*BIN, "threads", "--url", path, "--json"], check=True, capture_output=True, text=True
    )
    return path, json.loads(out.stdout)["threads"][0]["thread_id"]


def _headers(text: str) -> list[str]:
    """Header cells: the rows between a table's top rule (┏) and its header rule (┡)."""
    cells: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.lstrip().startswith("┏"):
            inside = True
            continue
        if line.lstrip().startswith("┡"):
            inside = False
            continue
        if inside:
            cells += [c.strip() for c in line.strip().strip("┃").split("┃")]
    return cells


@pytest.mark.parametrize(
    "command",
    [
        ["threads"],
        ["history", "{thread}"],
        ["history", "{thread}", "--limit", "8"],
        ["show", "{thread}"],
    ],
)
def test_tables_fit_80_columns_without_cutting_a_header(
    demo: tuple[str, str], command: list[str]
) -> None:
    path, thread = demo
    args = [a.format(thread=thread) for a in command]
    text = _in_pty([*args, "--url", path, "--no-pager"])
    headers = _headers(text)
    assert headers, text
    assert not [h for h in headers if "…" in h], text
    assert max(len(line) for line in text.splitlines()) <= 80, text
    # Whole tables: every top rule closes (nothing cropped at the right edge).
    tops = [line.strip() for line in text.splitlines() if line.lstrip().startswith("┏")]
    assert tops and all(t.endswith("┓") for t in tops), text
    for name in {
        "threads": ["thread", "checkpoints", "last step", "bytes"],
        "history": ["step", "checkpoint", "source", "nodes", "changed", "pending"],
        "show": ["channel", "kind", "value"],
    }[args[0]]:
        assert name in headers, (name, headers)


@pytest.mark.parametrize("cols", [50, 60])
def test_narrower_terminals_drop_columns_and_say_so(demo: tuple[str, str], cols: int) -> None:
    path, thread = demo
    for args in (["threads"], ["history", thread, "--limit", "4"]):
        text = _in_pty([*args, "--url", path, "--no-pager"], cols=cols)
        assert max(len(line) for line in text.splitlines()) <= cols, text
        tops = [line.strip() for line in text.splitlines() if line.lstrip().startswith("┏")]
        assert tops and all(t.endswith("┓") for t in tops), text
        assert not [h for h in _headers(text) if "…" in h], text
        assert "not shown" in text, text


def test_long_output_goes_through_the_pager(demo: tuple[str, str], tmp_path: Path) -> None:
    path, thread = demo
    seen = tmp_path / "paged.txt"
    pager = f"cat > {seen}"
    _in_pty(["history", thread, "--url", path], env={"PAGER": pager})
    assert "checkpoint" in seen.read_text()  # 110 checkpoints: longer than 24 rows
    seen.unlink()
    short = _in_pty(["threads", "--url", path], env={"PAGER": pager})
    assert not seen.exists() and "threads" in short  # fits the screen: printed directly
    direct = _in_pty(["history", thread, "--url", path, "--no-pager"], env={"PAGER": pager})
    assert not seen.exists() and "checkpoint" in direct
