"""`checkpointer ui` as a user starts it: a process that prints its URL and serves it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from click.testing import CliRunner

from checkpointer.cli import main
from checkpointer.cli.ui_cmd import _read_only_file
from tests.ui_support import build_demo


def _read_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        found = re.search(r"open (http://\S+)", line)
        if found:
            return found.group(1)
    proc.kill()
    raise AssertionError("checkpointer ui printed no URL: " + "".join(seen))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_ui_serves_the_url_it_prints(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    thread = build_demo(db)
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "checkpointer"),
            "ui",
            "--url",
            str(db),
            "--no-browser",
            "--graph",
            "checkpointer.demo:ChatState",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = _read_url(proc)
        assert url.startswith("http://127.0.0.1:") and "token=" in url
        base, token = url.split("/?token=")
        assert _get(base + "/")[0] == 403
        # A browser keeps the cookie the token buys; so does this opener.
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(f"{base}/?thread={thread}&token={token}", timeout=30) as response:
            page = response.read().decode()
        assert response.status == 200 and thread in page and "branch from step" in page
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_ui_needs_a_database() -> None:
    result = CliRunner().invoke(main, ["ui", "--no-browser"], env={"CHECKPOINTER_URL": ""})
    assert result.exit_code != 0 and "no database given" in result.output


def test_ui_refuses_a_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["ui", "--url", str(tmp_path / "nope.db"), "--no-browser"])
    assert result.exit_code != 0 and "no such SQLite database" in result.output


def test_a_writable_file_is_not_read_only(tmp_path: Path) -> None:
    db = tmp_path / "rw.db"
    db.write_bytes(b"")
    assert not _read_only_file(str(db))
    assert not _read_only_file("postgresql://localhost/x")
