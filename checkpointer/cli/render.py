"""Turning views into output: JSON-ready structures for `--json`, short labels for people.

JSON output must never fail on a value: anything JSON cannot hold is shown in a tagged,
readable form (`{"__class__": ..., ...fields}`, `{"__bytes__": base64}`, ...). This is a
*display* form; the lossless form is `checkpointer export`.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import math
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import PurePath
from typing import Any
from uuid import UUID

from checkpointer.channels import MISSING, DeltaSnapshot, Overwrite
from checkpointer.inspect import (
    ChannelDiff,
    ChannelView,
    DiffView,
    HistoryEntry,
    SeedView,
    StateView,
    Unloadable,
    WriteView,
    is_internal_channel,
)

MAX_DEPTH = 64


def _qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-compatible rendering of any stored value (deterministic, never raises)."""
    if depth > MAX_DEPTH:
        return repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if value is MISSING:
        return None
    nested = depth + 1
    if isinstance(value, Unloadable):
        return {"__unloadable__": value.reason, "type": value.type, "size": value.size}
    if isinstance(value, DeltaSnapshot):
        return {"__snapshot__": jsonable(value.value, nested)}
    if isinstance(value, Overwrite):
        return {"__overwrite__": jsonable(value.value, nested)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, enum.Enum):
        return {"__enum__": f"{type(value).__qualname__}.{value.name}"}
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, UUID | Decimal | PurePath):
        return str(value)
    if isinstance(value, BaseException):
        return {"__exception__": f"{type(value).__name__}: {value}"}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, nested) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {"__class__": _qualname(value), **jsonable(value._asdict(), nested)}
    if isinstance(value, list | tuple):
        return [jsonable(v, nested) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((jsonable(v, nested) for v in value), key=repr)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            fields = dump()
        except Exception:
            fields = None
        if isinstance(fields, dict):
            return {"__class__": _qualname(value), **jsonable(fields, nested)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        return {"__class__": _qualname(value), **jsonable(fields, nested)}
    try:
        items = list(value)
    except TypeError:
        return repr(value)
    return [jsonable(v, nested) for v in items]


# --------------------------------------------------------------------------- views
def write_json(w: WriteView) -> dict[str, Any]:
    return {
        "checkpoint_id": w.checkpoint_id,
        "checkpoint_step": w.step,
        "task_id": w.task_id,
        "task_path": w.task_path,
        "idx": w.idx,
        "channel": w.channel,
        "value": jsonable(w.value),
    }


def seed_json(seed: SeedView | None) -> dict[str, Any] | None:
    if seed is None:
        return None
    return {"checkpoint_id": seed.checkpoint_id, "step": seed.step, "value": jsonable(seed.value)}


def channel_json(view: ChannelView) -> dict[str, Any]:
    out: dict[str, Any] = {"version": view.version, "kind": view.kind}
    if view.has_value:
        out["value"] = jsonable(view.value)
    if view.kind in ("delta", "rebuilt"):
        out["seed"] = seed_json(view.seed)
        out["writes"] = [write_json(w) for w in view.writes]
    if view.note:
        out["note"] = view.note
    return out


def history_json(entry: HistoryEntry) -> dict[str, Any]:
    return {
        "checkpoint_id": entry.checkpoint_id,
        "parent_checkpoint_id": entry.parent_id,
        "step": entry.step,
        "source": entry.source,
        "created_at": entry.ts,
        "nodes": entry.nodes,
        "nodes_from": entry.nodes_from,
        "updated_channels": entry.updated_channels,
        "changed_channels": entry.changed_channels,
        "written_channels": entry.written_channels,
        "pending_writes": entry.pending_writes,
        "interrupts": jsonable(entry.interrupts),
        "children": entry.children,
        "run_id": entry.run_id,
    }


def state_json(view: StateView) -> dict[str, Any]:
    return {
        "thread_id": view.thread_id,
        "checkpoint_ns": view.checkpoint_ns,
        "checkpoint_id": view.checkpoint_id,
        "parent_checkpoint_id": view.parent_id,
        "created_at": view.ts,
        "step": view.step,
        "source": view.source,
        "values": {
            n: jsonable(c.value)
            for n, c in view.channels.items()
            if c.has_value and not is_internal_channel(n)
        },
        "channels": {n: channel_json(c) for n, c in view.channels.items()},
        "pending_writes": [write_json(w) for w in view.pending_writes],
        "interrupts": jsonable(view.interrupts),
        "metadata": jsonable(view.metadata),
    }


def channel_diff_json(diff: ChannelDiff) -> dict[str, Any]:
    out: dict[str, Any] = {"channel": diff.channel, "status": diff.status}
    for side, view in (("a", diff.a), ("b", diff.b)):
        out[f"version_{side}"] = view.version if view else None
        out[f"kind_{side}"] = view.kind if view else None
        if view is not None and view.has_value:
            out[side] = jsonable(view.value)
    out["writes_to_a"] = [write_json(w) for w in diff.writes_to_a]
    out["writes_to_b"] = [write_json(w) for w in diff.writes_to_b]
    return out


def diff_json(view: DiffView) -> dict[str, Any]:
    return {
        "thread_id": view.thread_id,
        "checkpoint_ns": view.checkpoint_ns,
        "a": view.a,
        "b": view.b,
        "step_a": view.step_a,
        "step_b": view.step_b,
        "relation": view.relation,
        "common_ancestor": view.common_ancestor,
        "channels": [channel_diff_json(c) for c in view.channels],
        "unchanged": view.unchanged,
    }


# --------------------------------------------------------------------------- text
def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"  # pragma: no cover


def short_ts(ts: str | None) -> str:
    """`2024-05-01T12:03:04.123+00:00` -> `2024-05-01 12:03:04`."""
    if not ts:
        return "-"
    return ts.replace("T", " ")[:19]


def names(items: list[str], *, internal: bool, hide: Any) -> str:
    shown = [i for i in items if internal or not hide(i)]
    return ", ".join(shown) if shown else "-"


def step_label(step: int | None) -> str:
    return "?" if step is None else str(step)
