"""Download the pinned source releases and prepare their tests for our savers.

Each suite's sdist goes to `.cache/sdists/` (`pip download --no-deps --no-binary :all:`);
its `tests/` and `pyproject.toml` (their pytest settings) are unpacked to
`.cache/<distribution>-<version>/`, and one import is appended to `tests/conftest.py` there
(created if the suite has none) that rebinds the suite's saver fixtures or saver names to
ours. Nothing else in the tests changes. A rerun reuses the cache; a change to the appended
text re-prepares the tree.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from conformance.suites import CACHE, Suite

MARK = "# --- appended by checkpointer's conformance runner (conformance/fetch.py) ---"

_HOOKS = {
    "langgraph": (
        "from conformance.lg_fixtures import async_checkpointer, sync_checkpointer  # noqa\n"
    ),
    "checkpoint": "from conformance.lib_shims import _conformance_savers  # noqa\n",
    "checkpoint-sqlite": "from conformance.lib_shims import _conformance_savers  # noqa\n",
    "checkpoint-postgres": (
        "from conformance.lib_shims import _conformance_savers  # noqa\n"
        "from conformance.lib_shims import pg_urls as _conformance_pg_urls  # noqa\n"
        "DEFAULT_POSTGRES_URI, DEFAULT_URI = _conformance_pg_urls()  # noqa\n"
    ),
}


def sdist(suite: Suite) -> Path:
    """The suite's source release, downloaded once."""
    target = CACHE / "sdists"
    target.mkdir(parents=True, exist_ok=True)
    stem = suite.distribution.replace("-", "_")
    for candidate in target.glob("*.tar.gz"):
        name = candidate.name.lower().replace("-", "_")
        if name == f"{stem}_{suite.version}.tar.gz":
            return candidate
    print(f"downloading {suite.distribution}=={suite.version} (sdist)", flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(target),
            f"{suite.distribution}=={suite.version}",
        ],
        check=True,
    )
    return sdist(suite)


def _stamp(suite: Suite) -> str:
    return hashlib.sha256(_HOOKS[suite.name].encode()).hexdigest()[:16]


def prepare(suite: Suite) -> Path:
    """The suite's tests, unpacked and hooked; reused when already prepared."""
    tree = suite.tree
    stamp_file = tree / ".conformance-stamp"
    if stamp_file.exists() and stamp_file.read_text() == _stamp(suite):
        return tree
    archive = sdist(suite)
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            # "<dist>-<version>/tests/..." and "<dist>-<version>/pyproject.toml"
            parts = Path(member.name).parts
            if len(parts) < 2:
                continue
            rel = Path(*parts[1:])
            if rel.parts[0] == "tests" or rel == Path("pyproject.toml"):
                member.name = str(rel)
                members.append(member)
        tar.extractall(tree, members=members, filter="data")
    conftest = tree / "tests" / "conftest.py"
    existing = conftest.read_text() if conftest.exists() else ""
    conftest.write_text(f"{existing.rstrip()}\n\n\n{MARK}\n{_HOOKS[suite.name]}".lstrip())
    stamp_file.write_text(_stamp(suite))
    return tree
