"""State schemas -> channels: how a graph's state declaration decides each key's merge rule.

A field's type says what the value looks like; its `Annotated` metadata says how parallel
writes merge (LangGraph's convention, so schemas written for LangGraph work unchanged):

- `Annotated[T, reducer]` with a two-argument callable -> `BinaryOperatorAggregate(T, reducer)`
- `Annotated[T, SomeChannel(...)]` -> a copy of that channel (a DeltaChannel takes `T`)
- `Annotated[T, SomeChannelClass]` -> `SomeChannelClass(T)`
- plain `T` -> `LastValue(T)`

Schemas may be TypedDicts, dataclasses or pydantic models.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, NotRequired, Required, get_origin, get_type_hints

from checkpointer.channels.base import BaseChannel, strip_extras, takes_two_positional
from checkpointer.channels.binop import BinaryOperatorAggregate
from checkpointer.channels.delta import DeltaChannel
from checkpointer.channels.last_value import LastValue

__all__ = [
    "ROOT_KEY",
    "SchemaChannels",
    "channel_for_field",
    "channels_from_schema",
    "field_defaults",
    "merge_channels",
    "merge_schemas",
    "schema_fields",
    "schema_keys",
]

ROOT_KEY = "__root__"
"""The single key of a schema that is a bare type (`StateGraph(int)`) rather than a record."""

AnyChannel = BaseChannel[Any, Any, Any]


def _is_pydantic_model(schema: Any) -> bool:
    return isinstance(schema, type) and isinstance(getattr(schema, "model_fields", None), dict)


def _is_record(schema: Any) -> bool:
    """Whether the schema declares fields (as opposed to being a bare value type)."""
    return isinstance(schema, type) and isinstance(getattr(schema, "__annotations__", None), dict)


def schema_fields(schema: Any) -> dict[str, Any]:
    """Each field's annotation, `Annotated` metadata kept, in declaration order.

    Class variables and a dataclass's `InitVar`s are not state. A bare type has one field,
    `ROOT_KEY`.
    """
    if not _is_record(schema):
        return {ROOT_KEY: schema}
    hints = get_type_hints(schema, include_extras=True)
    if dataclasses.is_dataclass(schema):
        names: Iterable[str] = [f.name for f in dataclasses.fields(schema)]
    elif _is_pydantic_model(schema):
        names = list(schema.model_fields)
    else:
        names = [name for name, hint in hints.items() if get_origin(hint) is not ClassVar]
    return {name: hints[name] for name in names if name in hints and name != "__slots__"}


def schema_keys(schema: Any) -> list[str]:
    """The state keys a schema declares, in declaration order."""
    return list(schema_fields(schema))


def field_defaults(schema: Any) -> dict[str, Any]:
    """Default values declared by a dataclass or pydantic schema (TypedDicts have none).

    Default factories are called, so each call returns fresh mutable defaults.
    """
    defaults: dict[str, Any] = {}
    if dataclasses.is_dataclass(schema) and isinstance(schema, type):
        for f in dataclasses.fields(schema):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
    elif _is_pydantic_model(schema):
        for name, info in schema.model_fields.items():
            if not info.is_required():
                defaults[name] = info.get_default(call_default_factory=True)
    return defaults


def channel_for_field(name: str, annotation: Any) -> AnyChannel:
    """The channel for one field, with `key` set to the field name.

    A channel instance found in the annotation is copied, never shared: one schema class
    may back several compiled graphs, and channels hold state.
    """
    unwrapped = strip_extras(annotation)
    metadata = _annotated_metadata(annotation)
    for item in metadata:
        if isinstance(item, DeltaChannel):
            channel: AnyChannel = DeltaChannel(
                item.reducer, unwrapped, snapshot_frequency=item.snapshot_frequency
            )
            channel.key = name
            return channel
        if isinstance(item, BaseChannel):
            channel = item.copy()
            channel.key = name
            return channel
        if isinstance(item, type) and issubclass(item, BaseChannel):
            try:
                channel = item(unwrapped)
            except TypeError as exc:
                raise ValueError(
                    f"State key {name!r}: cannot build {item.__name__} from the type alone "
                    f"({exc}); annotate with an instance, e.g. {item.__name__}(...)."
                ) from exc
            channel.key = name
            return channel
    if metadata:
        reducer = metadata[-1]
        if callable(reducer) and not isinstance(reducer, type):
            if not takes_two_positional(reducer):
                raise ValueError(
                    f"State key {name!r}: reducer {reducer!r} must take two positional "
                    "arguments (current value, update)."
                )
            return BinaryOperatorAggregate(unwrapped, reducer, key=name)
    return LastValue(unwrapped, key=name)


def _annotated_metadata(annotation: Any) -> tuple[Any, ...]:
    """The `Annotated` metadata of a field, looking through Required/NotRequired wrappers."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            return tuple(annotation.__metadata__)
        if origin not in (Required, NotRequired):
            return ()
        annotation = annotation.__args__[0]


def channels_from_schema(schema: Any) -> dict[str, AnyChannel]:
    """One channel per field of `schema`, keyed (and `.key`-ed) by field name."""
    return {name: channel_for_field(name, hint) for name, hint in schema_fields(schema).items()}


def merge_channels(
    channels: dict[str, AnyChannel], new: Mapping[str, AnyChannel]
) -> dict[str, AnyChannel]:
    """Add `new` into `channels` (in place, also returned), rejecting conflicting declarations.

    A key declared in two schemas must merge the same way in both. The one exception is a
    plain field (LastValue): an input or output schema usually lists a key without its
    reducer, and that must not replace or contradict the state schema's reducer.
    """
    for key, channel in new.items():
        existing = channels.get(key)
        if existing is None:
            channels[key] = channel
        elif existing != channel and not isinstance(channel, LastValue):
            raise ValueError(
                f"State key {key!r} is declared with two different channels: {existing!r} "
                f"and {channel!r}. Declare the same reducer for it in every schema, or leave it "
                "plain in all but one."
            )
    return channels


def merge_schemas(*schemas: Any) -> dict[str, AnyChannel]:
    """The channels of several schemas together; the first schema that declares a key wins."""
    channels: dict[str, AnyChannel] = {}
    for schema in schemas:
        merge_channels(channels, channels_from_schema(schema))
    return channels


@dataclass
class SchemaChannels:
    """A graph's state, input and output schemas resolved into one set of channels.

    `channels` are specs: a runtime hydrates fresh ones with `from_checkpoint`, or `fresh()`.
    """

    channels: dict[str, AnyChannel]
    state_keys: tuple[str, ...]
    input_keys: tuple[str, ...]
    output_keys: tuple[str, ...]
    defaults: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_schemas(
        cls,
        state_schema: Any,
        *,
        input_schema: Any | None = None,
        output_schema: Any | None = None,
    ) -> SchemaChannels:
        """Resolve the schemas; input/output default to the state schema, as in LangGraph."""
        input_schema = state_schema if input_schema is None else input_schema
        output_schema = state_schema if output_schema is None else output_schema
        channels = merge_schemas(state_schema, input_schema, output_schema)
        return cls(
            channels=channels,
            state_keys=tuple(schema_keys(state_schema)),
            input_keys=tuple(schema_keys(input_schema)),
            output_keys=tuple(schema_keys(output_schema)),
            defaults=field_defaults(state_schema),
        )

    def fresh(self) -> dict[str, AnyChannel]:
        """Independent empty-or-initial copies of every channel, for one run."""
        return {key: channel.copy() for key, channel in self.channels.items()}
