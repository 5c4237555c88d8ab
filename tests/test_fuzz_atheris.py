"""Coverage-guided fuzzing of the read path with atheris (libFuzzer), when installed.

The pytest test runs this file as a script for a few seconds
(`CHECKPOINTER_ATHERIS_SECONDS`, default 3; 0 skips) starting from a corpus of valid
encodings. The fuzz target asserts what tests/test_fuzz.py asserts with hypothesis: a
stored `(tag, bytes)` pair loads or raises `DeserializationError` (plain and encrypted
serializers), and no module outside the allowlist gets imported. Any other exception
makes libFuzzer stop and save the input under the artifact directory.

By hand: `python tests/test_fuzz_atheris.py -max_total_time=600 CORPUS_DIR`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

SECONDS = int(os.environ.get("CHECKPOINTER_ATHERIS_SECONDS", "3"))
TAGS = ["msgpack", "bytes", "null", "msgpack+zstd", "aesgcm", "pickle", ""]
ALLOWED_MODULE = "colorsys"


def _target() -> None:  # pragma: no cover - runs under atheris in a subprocess
    import atheris

    with atheris.instrument_imports():
        from checkpointer.errors import DeserializationError
        from checkpointer.serde import MsgpackSerializer
        from checkpointer.serde.compression import load_typed
        from checkpointer.serde.encryption import EncryptedSerializer

    import zstandard  # noqa: F401  (the +zstd tag's own library: not a stored-data import)

    plain = MsgpackSerializer(allowed_modules=[ALLOWED_MODULE])
    encrypted = EncryptedSerializer(plain, keys={"k": bytes(32)}, active_key_id="k")
    baseline: set[str] = set()

    def one_input(data: bytes) -> None:
        if not baseline:  # atheris imports its own modules once fuzzing starts
            baseline.update(sys.modules)
        fdp = atheris.FuzzedDataProvider(data)
        tag = fdp.PickValueInList(TAGS)
        serde = encrypted if fdp.ConsumeBool() else plain
        raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        with contextlib.suppress(DeserializationError):
            load_typed(serde, (tag, raw))
        if len(sys.modules) != len(baseline):
            new = set(sys.modules) - baseline - {ALLOWED_MODULE}
            if new:
                raise AssertionError(f"loading imported {sorted(new)}")

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


def _corpus(directory: Path) -> None:
    """Seed inputs: valid encodings behind a 2-byte prefix the target's provider reads."""
    from checkpointer.serde import MsgpackSerializer
    from checkpointer.serde.encryption import EncryptedSerializer

    values = [
        {"a": [1, (2, 3)], "b": {4, 5}},
        ValueError("x"),
        [b"\x00", 2**90, 1.5, None],
    ]
    plain = MsgpackSerializer()
    encrypted = EncryptedSerializer(plain, keys={"k": bytes(32)}, active_key_id="k")
    directory.mkdir(parents=True, exist_ok=True)
    for i, value in enumerate(values):
        for j, serde in enumerate((plain, encrypted)):
            _, data = serde.dumps_typed(value)
            (directory / f"seed-{i}-{j}").write_bytes(bytes([0, j]) + data)


def test_atheris_finds_nothing_in_a_short_run(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    if SECONDS <= 0:
        pytest.skip("CHECKPOINTER_ATHERIS_SECONDS=0")
    corpus = tmp_path / "corpus"
    _corpus(corpus)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            f"-max_total_time={SECONDS}",
            f"-artifact_prefix={artifacts}/",
            "-rss_limit_mb=2048",
            "-max_len=4096",
            str(corpus),
        ],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
    )
    found = sorted(p.name for p in artifacts.iterdir())
    assert proc.returncode == 0 and not found, proc.stderr[-3000:]
    runs = [line for line in proc.stderr.splitlines() if "Done" in line]
    print("\natheris:", runs[-1] if runs else proc.stderr.splitlines()[-1:])


if __name__ == "__main__":
    _target()
