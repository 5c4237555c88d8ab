"""`--graph module:attr`: the channels (reducers) a thread was written with.

Delta channels store writes, not values; rebuilding one needs its reducer, which lives in
the user's code. The option names a graph builder or compiled graph (ours or LangGraph's)
or a state schema, and this module turns it into our channel specs. LangGraph's
`DeltaChannel` and `BinaryOperatorAggregate` become ours with the same reducer, so both
kinds of thread replay through one engine.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_origin

from checkpointer.channels import BaseChannel, BinaryOperatorAggregate, DeltaChannel
from checkpointer.errors import CheckpointerError
from checkpointer.state import channel_for_field, schema_fields

AnyChannel = BaseChannel[Any, Any, Any]


class GraphOptionError(CheckpointerError):
    """`--graph` does not name something this tool can take channels from."""


@dataclass(frozen=True, slots=True)
class GraphChannels:
    """The channel specs found, and the modules whose classes values may name."""

    channels: dict[str, AnyChannel]
    modules: tuple[str, ...]


def load_graph(ref: str) -> GraphChannels:
    """Import `module:attr` (or `path/to/file.py:attr`) and take its channels."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise GraphOptionError(f"--graph {ref!r}: expected module:attr, e.g. myapp.graph:builder")
    module = _import(module_name, ref)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise GraphOptionError(f"--graph {ref!r}: {module.__name__} has no {attr!r}") from exc
    channels = channels_of(obj, ref)
    modules = {module.__name__}
    schema = getattr(obj, "state_schema", None) or getattr(
        getattr(obj, "builder", None), "state_schema", None
    )
    if isinstance(obj, type):
        schema = obj
    if isinstance(schema, type) and schema.__module__ not in ("builtins", "typing"):
        modules.add(schema.__module__)
    return GraphChannels(channels, tuple(sorted(modules)))


def _import(name: str, ref: str) -> Any:
    if name.endswith(".py") or os.sep in name:
        path = Path(name)
        if not path.is_file():
            raise GraphOptionError(f"--graph {ref!r}: no such file {name!r}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise GraphOptionError(f"--graph {ref!r}: cannot import {name!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise GraphOptionError(f"--graph {ref!r}: cannot import {name!r}: {exc}") from exc


def channels_of(obj: Any, ref: str = "") -> dict[str, AnyChannel]:
    """Channel specs from a builder, compiled graph (ours or LangGraph's) or a schema."""
    spec = getattr(obj, "spec", None)
    if spec is not None and isinstance(getattr(spec, "channels", None), Mapping):
        return dict(spec.channels)  # our CompiledStateGraph
    schema_channels = getattr(getattr(obj, "schema", None), "channels", None)
    if isinstance(schema_channels, Mapping):
        return dict(schema_channels)  # our StateGraph builder
    foreign = getattr(obj, "channels", None)
    if isinstance(foreign, Mapping):  # LangGraph StateGraph or compiled graph
        out: dict[str, AnyChannel] = {}
        for name, channel in foreign.items():
            converted = convert_channel(channel)
            if converted is not None:
                converted.key = str(name)
                out[str(name)] = converted
        return out
    if isinstance(obj, type) and isinstance(getattr(obj, "__annotations__", None), dict):
        return schema_channels_of(obj)
    raise GraphOptionError(
        f"--graph {ref!r}: expected a StateGraph, a compiled graph or a state schema, got "
        f"{type(obj).__name__}"
    )


def convert_channel(channel: Any) -> AnyChannel | None:
    """Ours as is; LangGraph's reducer channels as ours (other kinds need no reducer)."""
    if isinstance(channel, BaseChannel):
        return channel
    typ = getattr(channel, "typ", None)
    reducer = getattr(channel, "reducer", None)
    if callable(reducer) and hasattr(channel, "snapshot_frequency"):
        return DeltaChannel(
            reducer,
            typ if isinstance(typ, type) else None,
            snapshot_frequency=int(channel.snapshot_frequency),
        )
    operator = getattr(channel, "operator", None)
    if callable(operator):
        return BinaryOperatorAggregate(typ if isinstance(typ, type) else object, operator)
    return None


def schema_channels_of(schema: type) -> dict[str, AnyChannel]:
    """Channels of a state schema; LangGraph channel annotations are converted."""
    out: dict[str, AnyChannel] = {}
    for name, hint in schema_fields(schema).items():
        foreign = next(
            (
                item
                for item in (hint.__metadata__ if get_origin(hint) is Annotated else ())
                if not isinstance(item, BaseChannel)
                and convert_channel(item) is not None
                and hasattr(item, "update")
            ),
            None,
        )
        channel = convert_channel(foreign) if foreign is not None else None
        if channel is None:
            channel = channel_for_field(name, hint)
        channel.key = name
        out[name] = channel
    return out
