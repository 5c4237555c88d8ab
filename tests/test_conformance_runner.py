"""The conformance runner's own plumbing (conformance/): pins, the excludes list, and how a
downloaded suite is prepared. Running LangGraph's suites is `python -m conformance`."""

from __future__ import annotations

import io
import tarfile
import tomllib
from pathlib import Path

import pytest

from conformance import fetch, suites


def test_versions_come_from_pins_toml_alone() -> None:
    pins = tomllib.loads(suites.PINS.read_text())["suites"]
    loaded = suites.load()
    assert set(loaded) == set(pins)
    for name, suite in loaded.items():
        assert (suite.distribution, suite.version) == (
            pins[name]["distribution"],
            pins[name]["version"],
        )
        assert suite.tree.name == f"{suite.distribution}-{suite.version}"


def test_every_exclude_names_a_known_suite_and_gives_a_reason() -> None:
    known = set(suites.load())
    excludes = suites.load_excludes()
    assert excludes
    for rule in excludes:
        assert rule.suite in known, rule
        assert len(rule.reason) > 20, rule


def test_exclude_patterns_cover_parametrizations_and_classes() -> None:
    whole = suites.Exclude("s", "tests/t.py::test_a", "why")
    assert whole.matches("s", "tests/t.py::test_a")
    assert whole.matches("s", "tests/t.py::test_a[memory-sync]")
    assert not whole.matches("s", "tests/t.py::test_ab")
    assert not whole.matches("other", "tests/t.py::test_a")
    one = suites.Exclude("s", "tests/t.py::test_a[pool]", "why")
    assert one.matches("s", "tests/t.py::test_a[pool]")
    assert not one.matches("s", "tests/t.py::test_a[base]")
    cls = suites.Exclude("s", "tests/t.py::TestX::*", "why")
    assert cls.matches("s", "tests/t.py::TestX::test_y")
    assert not cls.matches("s", "tests/t.py::TestZ::test_y")


def test_a_line_without_a_reason_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "excludes.txt"
    bad.write_text("langgraph tests/test_x.py::test_y\n")
    with pytest.raises(ValueError, match="reason"):
        suites.load_excludes(bad)


def _fake_sdist(path: Path, conftest: str | None) -> None:
    files = {
        "demo-1.0/pyproject.toml": "[tool.pytest.ini_options]\n",
        "demo-1.0/tests/__init__.py": "",
        "demo-1.0/tests/test_demo.py": "def test_ok():\n    pass\n",
        "demo-1.0/demo/__init__.py": "SHADOWS = True\n",
    }
    if conftest is not None:
        files["demo-1.0/tests/conftest.py"] = conftest
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("conftest", ["import os\n", None])
def test_prepare_unpacks_only_tests_and_appends_the_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, conftest: str | None
) -> None:
    monkeypatch.setattr(suites, "CACHE", tmp_path)
    monkeypatch.setattr(fetch, "CACHE", tmp_path)
    (tmp_path / "sdists").mkdir()
    _fake_sdist(tmp_path / "sdists" / "demo-1.0.tar.gz", conftest)
    suite = suites.Suite("checkpoint", "demo", "1.0", ("tests/test_demo.py",))

    tree = fetch.prepare(suite)

    assert (tree / "tests" / "test_demo.py").read_text() == "def test_ok():\n    pass\n"
    assert (tree / "pyproject.toml").exists()
    assert not (tree / "demo").exists()  # the package source would shadow the installed one
    text = (tree / "tests" / "conftest.py").read_text()
    assert text.startswith(conftest or fetch.MARK)
    assert text.count(fetch.MARK) == 1
    assert "conformance.lib_shims" in text
    # A second prepare reuses the tree and does not append twice.
    fetch.prepare(suite)
    assert (tree / "tests" / "conftest.py").read_text().count(fetch.MARK) == 1
