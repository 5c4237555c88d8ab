"""Fresh copies of decoded plain data, for caches that must never share a mutable object.

A cache of decoded values may hand out a value again only as a new object that no other
caller (and not the cache) holds: a caller is free to mutate what a read returned. Decoding
the stored bytes again gives that, at full cost. For the shapes most stored values take, a
copy made by a few C calls gives it too, several times faster: a chat history is a list of
flat dicts, and `list(map(dict.copy, items))` is about five times as fast as ormsgpack
decoding the same list.

`copier_for(value)` says how to copy a decoded value, or None when no cheap and exact copy
exists: immutable scalars are handed out as they are; a dict or list holding only scalars is
copied by one C call (tuples of scalars count as scalars: a metadata's delta counters are
pairs); a list of such dicts by one call per dict; a dict of scalars, lists and flat dicts
(metadata) by one call per container; a `DeltaSnapshot` of any of these by copying what it
wraps. Only exact types count (a subclass may carry state a shallow copy would share), and
anything nested deeper is refused: a shallow copy would share the inner container.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any, Final

from checkpointer.channels.markers import DeltaSnapshot

Copier = Callable[[Any], Any]

SCALARS: Final = frozenset({str, int, float, bool, type(None), bytes})
"""Immutable types a copy may share with the original (exact types only)."""

_CONTAINERS: Final = frozenset({dict, list})
_DICT: Final = frozenset({dict})


def same(value: Any) -> Any:
    """The copier of an immutable value: the value itself."""
    return value


def copy_records(value: list[dict[Any, Any]]) -> list[dict[Any, Any]]:
    """A fresh copy of a list of flat dicts (`is_record`): one `dict.copy` each."""
    return list(map(dict.copy, value))


def scalars_only(values: Any) -> bool:
    return SCALARS.issuperset(map(type, values))


def _immutable(item: Any) -> bool:
    """A scalar or a tuple of scalars."""
    return type(item) in SCALARS or (type(item) is tuple and scalars_only(item))


def is_record(item: Any) -> bool:
    """A dict whose keys are scalars and values scalars or tuples of scalars: one
    `dict.copy` makes it fresh."""
    if type(item) is not dict or not scalars_only(item):
        return False
    values = item.values()
    return scalars_only(values) or all(map(_immutable, values))


def _list_copier(items: list[Any]) -> Copier | None:
    if scalars_only(items):
        return list.copy
    if _flat_records(items):
        return copy_records
    for item in items:
        if not is_record(item):
            return None
    return copy_records


def _flat_records(items: list[Any]) -> bool:
    """Whether every item is a dict of scalar keys and scalar values, checked in three C
    passes over all the items (a chat history of thousands of messages), not a Python
    call each. False also when some value is a tuple: `is_record` then decides item by
    item."""
    return (
        _DICT.issuperset(map(type, items))
        and scalars_only(chain.from_iterable(items))
        and scalars_only(chain.from_iterable(map(dict.values, items)))
    )


def _copy_fields(value: dict[Any, Any]) -> dict[Any, Any]:
    return {k: v.copy() if type(v) in _CONTAINERS else v for k, v in value.items()}


def _is_field(item: Any) -> bool:
    """A scalar, a tuple or list of scalars, or a flat dict (`_copy_fields` copies a dict
    of these with one `copy` per container)."""
    kind = type(item)
    if kind in SCALARS:
        return True
    if kind is tuple or kind is list:
        return scalars_only(item)
    return is_record(item)


def _snapshot_copier(inner: Copier) -> Copier:
    def copy(snapshot: DeltaSnapshot) -> DeltaSnapshot:
        return DeltaSnapshot(inner(snapshot.value))

    return copy


def copier_for(value: Any) -> Copier | None:
    """How to make a fresh, equal copy of the decoded `value` cheaply; None when there is
    no such copy (the value must be decoded again instead). See the module doc."""
    kind = type(value)
    if kind in SCALARS:
        return same
    if kind is list:
        return _list_copier(value)
    if kind is dict:
        if is_record(value):
            return dict.copy
        if scalars_only(value) and all(map(_is_field, value.values())):
            return _copy_fields
        return None
    if kind is DeltaSnapshot:
        inner = copier_for(value.value)
        return None if inner is None else _snapshot_copier(inner)
    return None
