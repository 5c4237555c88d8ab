"""Values a put must store although its `new_versions` leave them out (issue #15).

A put stores the values of the channels whose version moved; the others keep pointing at
the value stored with their version, wherever that was. That holds when the version came
from the parent. It does not when a checkpoint brings a value at a version nothing stored
a value for: a root or a child of an unsaved parent put with values and
`new_versions={}`, a re-put or a fork carrying a value (a delta channel's snapshot) at a
version whose value was never stored. Then the put stores it, so that a channel's value
resolves from its version whichever checkpoint stored it:

- a channel at a version its parent's record does not hold, with a value in
  `channel_values` and none found inline in the thread (`core.inline_sources_stmt`):
  a value row, written only if none exists at that version (`restored`). Never inline:
  the value at a version lives in one place, and a row may already hold it;
- a channel with a value but no version at all (LangGraph's SQLite saver keeps the
  checkpoint whole, and its tests seed delta walks so): kept in the record when the
  serializer keeps small scalars there (`unversioned_inline`), as LangGraph's PostgreSQL
  saver keeps such primitives in its record. Anything else has no key to be stored
  under and is dropped, as LangGraph's in-memory and PostgreSQL savers drop it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from checkpointer.savers.sql.inline import Inline, inlinable
from checkpointer.types import ChannelVersions, Checkpoint


def restored(
    checkpoint: Checkpoint, wanted: Sequence[tuple[str, str]], found_inline: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """(version, value) of the `wanted` channels (unchanged, at a version the parent does
    not hold) that have a value here and were not found inline: value rows to write if
    absent."""
    values, versions = checkpoint["channel_values"], checkpoint["channel_versions"]
    return {
        ch: (versions[ch], values[ch])
        for ch, _ in wanted
        if ch in values and ch not in found_inline
    }


def unversioned_inline(checkpoint: Checkpoint, new_versions: ChannelVersions) -> Inline:
    """The small scalar values of channels that have no version in this checkpoint."""
    versions, values = checkpoint["channel_versions"], checkpoint["channel_values"]
    if type(versions) is dict and type(values) is dict and versions.keys() >= values.keys():
        return {}  # every put of a graph: each value has its version (one C-level test)
    return {
        ch: value
        for ch, value in values.items()
        if ch not in versions and ch not in new_versions and inlinable(value)
    }
