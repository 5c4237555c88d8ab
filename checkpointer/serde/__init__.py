"""Serializer package (placeholder until the msgpack serializer lands)."""

from __future__ import annotations

import pickle
from typing import Any, Protocol


class Serializer(Protocol):
    def dumps_typed(self, obj: Any) -> tuple[str, bytes]: ...

    def loads_typed(self, data: tuple[str, bytes]) -> Any: ...


class _PickleSerializer:
    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return "pickle", pickle.dumps(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return pickle.loads(data[1])


def default_serializer() -> Serializer:
    return _PickleSerializer()
