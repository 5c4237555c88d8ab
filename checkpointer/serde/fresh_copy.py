"""Fresh copies of decoded plain data, for caches that must never share a mutable object.

A cache of decoded values may hand out a value again only as a new object that no other
caller (and not the cache) holds: a caller is free to mutate what a read returned. Decoding
the stored bytes again gives that, at full cost. For the shapes most stored values take, a
copy made by a few C calls gives it too, several times faster: a chat history is a list of
flat dicts, and `list(map(dict.copy, items))` is about five times as fast as ormsgpack
decoding the same list.

`copier_for(value)` says how to copy a decoded value, or None when no cheap and exact copy
exists: immutable scalars are handed out as they are; a dict or list holding only scalars is
copied by one C call; a list of such dicts by one call per dict; a `DeltaSnapshot` of any of
these by copying what it wraps. Only exact types count (a subclass may carry state a shallow
copy would share), and anything nested deeper (a dict holding a list, a tuple holding a
list) is refused: a shallow copy would share the inner container.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from checkpointer.channels.markers import DeltaSnapshot

Copier = Callable[[Any], Any]

SCALARS: Final = frozenset({str, int, float, bool, type(None), bytes})
"""Immutable types a copy may share with the original (exact types only)."""


def _same(value: Any) -> Any:
    return value


def _copy_records(value: list[dict[Any, Any]]) -> list[dict[Any, Any]]:
    return list(map(dict.copy, value))


def _scalars_only(values: Any) -> bool:
    return SCALARS.issuperset(map(type, values))


def _is_record(item: Any) -> bool:
    """A dict whose keys and values are all scalars: one `dict.copy` makes it fresh."""
    return type(item) is dict and _scalars_only(item) and _scalars_only(item.values())


def _list_copier(items: list[Any]) -> Copier | None:
    if _scalars_only(items):
        return list.copy
    for item in items:
        if not _is_record(item):
            return None
    return _copy_records


def _snapshot_copier(inner: Copier) -> Copier:
    def copy(snapshot: DeltaSnapshot) -> DeltaSnapshot:
        return DeltaSnapshot(inner(snapshot.value))

    return copy


def copier_for(value: Any) -> Copier | None:
    """How to make a fresh, equal copy of the decoded `value` cheaply; None when there is
    no such copy (the value must be decoded again instead). See the module doc."""
    kind = type(value)
    if kind in SCALARS:
        return _same
    if kind is list:
        return _list_copier(value)
    if kind is dict:
        return dict.copy if _is_record(value) else None
    if kind is DeltaSnapshot:
        inner = copier_for(value.value)
        return None if inner is None else _snapshot_copier(inner)
    return None


def copy_records(value: list[dict[Any, Any]]) -> list[dict[Any, Any]]:
    """A fresh copy of a list of flat dicts (see `copier_for`), for callers that already
    know the shape."""
    return _copy_records(value)
