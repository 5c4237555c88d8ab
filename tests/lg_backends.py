"""Our savers by backend name, for tests that run the same scenario on each."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.savers.memory import InMemorySaver

BACKENDS = ["memory"]


@contextmanager
def open_backend(name: str, request: pytest.FixtureRequest) -> Iterator[BaseCheckpointSaver]:
    if name == "memory":
        yield InMemorySaver()
        return
    raise ValueError(f"unknown backend {name!r}")
