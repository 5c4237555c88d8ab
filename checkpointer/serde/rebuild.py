"""Rebuilding objects from stored fields without running the class's own code.

Loading must not call `__init__`, `__post_init__`, `__new__` overrides, validators,
`model_post_init`, `_missing_` hooks or property setters of the class named in stored
data: the data decides the values, never which code runs. So instances are made the way
unpickling makes them, with C-level pieces only:

- `bare_instance` calls the nearest `__new__` in the MRO that is implemented in C
  (`object.__new__`, `BaseException.__new__`, `str.__new__`...), skipping any written in
  Python;
- fields are written into the instance `__dict__` directly, or through C slot descriptors
  (`__slots__`), never through `setattr` (which would run `__setattr__` and descriptors);
- a missing field takes the default the class declares (its `default_factory` is the one
  piece of class code that can run, as in pickle's handling of new fields: it is part of
  the class's declaration, called with no stored input).

Each builder gets a class that the policy already allowed and checked to be of its kind.
Anything that cannot be rebuilt this way raises `CannotRebuild`; callers turn that into a
`DeserializationError` (or, for exceptions, a stand-in).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from enum import EnumMeta, Flag
from types import GetSetDescriptorType, MemberDescriptorType
from typing import Any, Final

_C_DESCRIPTORS: Final = (MemberDescriptorType, GetSetDescriptorType)
_FLAG_MISSING: Final = Flag.__dict__["_missing_"].__func__


class CannotRebuild(Exception):
    """The class cannot be rebuilt without running its own code; the message says why."""


def _c_level(func: Any) -> bool:
    """Whether a `__new__`/`__init__` found in a class dict is implemented in C."""
    return not isinstance(func, staticmethod | classmethod) and not hasattr(func, "__code__")


def _nearest_c(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        func = klass.__dict__.get(name)
        if func is not None and _c_level(func):
            return func
    return None  # pragma: no cover - object defines both in C


def bare_instance(cls: type, *args: Any) -> Any:
    """An instance of `cls` made by its nearest C-level `__new__` (user `__new__` skipped)."""
    new = _nearest_c(cls, "__new__")
    try:
        return new(cls, *args)
    except Exception as exc:
        raise CannotRebuild(
            f"{cls.__qualname__} cannot be made without its own code: {exc}"
        ) from None


def _class_attribute(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _instance_dict(obj: Any) -> dict[str, Any] | None:
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return None
    return namespace if type(namespace) is dict else None


def store_attributes(obj: Any, items: Iterable[tuple[str, Any]]) -> None:
    """Set attributes on a bare instance: C slots and getset descriptors (`__slots__`,
    `BaseException.args`, `ImportError.name`) directly, everything else into the instance
    dict. A Python descriptor (property) of that name shadows the dict entry, as it would
    after unpickling; its setter is never called."""
    cls = type(obj)
    namespace = _instance_dict(obj)
    for name, value in items:
        attribute = _class_attribute(cls, name)
        if isinstance(attribute, _C_DESCRIPTORS) and name not in ("__dict__", "__class__"):
            try:
                attribute.__set__(obj, value)
            except (TypeError, ValueError, AttributeError) as exc:
                raise CannotRebuild(f"cannot set {name!r} of {cls.__qualname__}: {exc}") from None
        elif namespace is not None:
            namespace[name] = value
        else:
            raise CannotRebuild(f"{cls.__qualname__} has no place to store {name!r}") from None


# ---------------------------------------------------------------------- dataclasses

_Field = tuple[str, Any, Any, Callable[[Any, Any], None] | None]
_Plan = tuple[Callable[..., Any], tuple[_Field, ...]]
_NO_DEFAULT: Final = dataclasses.MISSING


def nearest_c_new(cls: type) -> Callable[..., Any]:
    """The `__new__` that `bare_instance` calls, for callers that build many instances."""
    new: Callable[..., Any] = _nearest_c(cls, "__new__")
    return new


def dataclass_plan(cls: type) -> _Plan:
    """How to build instances of a dataclass, worked out once per class: its C-level
    `__new__`, and per field its name, default, default factory and C slot setter (None:
    the field goes into the instance dict)."""
    fields = []
    for f in dataclasses.fields(cls):
        attribute = _class_attribute(cls, f.name)
        setter = attribute.__set__ if isinstance(attribute, _C_DESCRIPTORS) else None
        fields.append((f.name, f.default, f.default_factory, setter))
    return nearest_c_new(cls), tuple(fields)


def build_dataclass(cls: type, plan: _Plan, values: dict[str, Any]) -> Any:
    """A dataclass instance with the stored fields (and declared defaults for the missing
    ones); stored fields the class no longer has are dropped."""
    new, fields = plan
    try:
        obj = new(cls)
    except Exception as exc:
        raise CannotRebuild(f"{cls.__qualname__} cannot be made: {exc}") from None
    namespace = _instance_dict(obj)
    for name, default, factory, setter in fields:
        if name in values:
            value = values[name]
        elif default is not _NO_DEFAULT:
            value = default
        elif factory is not _NO_DEFAULT:
            value = factory()
        else:
            continue
        if setter is not None:
            setter(obj, value)
        elif namespace is not None:
            namespace[name] = value
        else:
            raise CannotRebuild(f"{cls.__qualname__} has no place to store {name!r}")
    return obj


# ------------------------------------------------------------------------ pydantic


def _new_instance(cls: type, new: Callable[..., Any] | None) -> Any:
    if new is None:
        return bare_instance(cls)
    try:
        return new(cls)
    except Exception as exc:
        raise CannotRebuild(f"{cls.__qualname__} cannot be made: {exc}") from None


def build_pydantic(
    cls: Any, values: dict[str, Any], fields_set: set[str], new: Callable[..., Any] | None = None
) -> Any:
    """A pydantic v2 model as its own unpickling makes one: `__dict__`, the fields set, the
    extra and private values set directly; no validator or `model_post_init` runs. `new`:
    the class's C-level `__new__` if the caller has it at hand (`nearest_c_new`)."""
    obj = _new_instance(cls, new)
    fields = cls.__pydantic_fields__
    data: dict[str, Any] = {}
    for name, field in fields.items():
        if name in values:
            data[name] = values[name]
        elif not field.is_required():
            data[name] = field.get_default(call_default_factory=True, validated_data=data)
    setter = object.__setattr__
    setter(obj, "__dict__", data)
    setter(obj, "__pydantic_fields_set__", fields_set)
    if not getattr(cls, "__pydantic_root_model__", False):
        extra = None
        if cls.model_config.get("extra") == "allow":
            extra = {k: v for k, v in values.items() if k not in fields}
        private = None
        attributes = getattr(cls, "__private_attributes__", None) or {}
        if attributes:
            from pydantic_core import PydanticUndefined

            private = {}
            for name, attribute in attributes.items():
                default = attribute.get_default()
                if default is not PydanticUndefined:
                    private[name] = default
        setter(obj, "__pydantic_extra__", extra)
        setter(obj, "__pydantic_private__", private)
    return obj


def build_pydantic_v1(
    cls: Any, values: dict[str, Any], fields_set: set[str], new: Callable[..., Any] | None = None
) -> Any:
    """A pydantic v1 model as `construct` makes one, minus any code of the class."""
    from pydantic.v1.fields import Undefined

    obj = _new_instance(cls, new)
    data: dict[str, Any] = {}
    for name, field in cls.__fields__.items():
        if name in values:
            data[name] = values[name]
        elif not field.required:
            data[name] = field.get_default()
    data.update(values)
    setter = object.__setattr__
    setter(obj, "__dict__", data)
    setter(obj, "__fields_set__", fields_set)
    for name, attribute in (getattr(cls, "__private_attributes__", None) or {}).items():
        default = attribute.get_default()
        if default is not Undefined:
            setter(obj, name, default)
    return obj


# ----------------------------------------------------------------- named tuples, enums


def build_named_tuple(cls: Any, items: list[Any]) -> Any:
    """`tuple.__new__` with the stored items, padded with the declared defaults of fields
    added since; the generated `__new__` (and any override) is not called."""
    fields = cls._fields
    if len(items) < len(fields):
        defaults = cls._field_defaults
        missing = fields[len(items) :]
        if not all(name in defaults for name in missing):
            raise CannotRebuild(
                f"stored {cls.__qualname__} has {len(items)} items, the class needs "
                f"{len(fields)} and has no default for {missing[0]!r}"
            )
        items = [*items, *(defaults[name] for name in missing)]
    elif len(items) > len(fields):
        raise CannotRebuild(
            f"stored {cls.__qualname__} has {len(items)} items, the class has {len(fields)}"
        )
    return tuple.__new__(cls, items)


def build_enum(cls: Any, value: Any) -> Any:
    """The member of `cls` whose value is `value`, through the member map; a `_missing_`
    hook of the class is never called. Composite flags are made by `Flag`'s own code,
    and only when neither the class nor its metaclass replaced it."""
    try:
        member = cls._value2member_map_.get(value)
    except TypeError:  # an unhashable value: members are compared one by one
        member = None
    if member is None:
        for candidate in cls._member_map_.values():
            if candidate._value_ == value:
                return candidate
        missing = getattr(cls._missing_, "__func__", None)
        stock_flag = (
            issubclass(cls, Flag)
            and missing is _FLAG_MISSING
            and type(cls).__call__ is EnumMeta.__call__
            and type(value) is int
        )
        if stock_flag:
            try:
                return cls(value)
            except ValueError:
                pass
        raise CannotRebuild(f"{cls.__qualname__} has no member with value {value!r}") from None
    return member


# ----------------------------------------------------------------------- exceptions


def has_python_init(cls: type) -> bool:
    """Whether the `__init__` that calling `cls` would run is written in Python."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            return not _c_level(init)
    return False  # pragma: no cover - object defines one


def build_exception(cls: type[BaseException], args: list[Any], state: dict[str, Any]) -> Any:
    """An exception made by C code only: the nearest C `__new__` and `__init__` with the
    stored args (builtin exceptions set their fields there, `OSError.errno` say; for other
    classes `BaseException` just keeps them as `args`), an `__init__` or `__new__` written
    in Python skipped; then the stored attributes."""
    try:
        exc = bare_instance(cls, *args)
    except CannotRebuild:
        exc = bare_instance(cls)
        BaseException.__dict__["args"].__set__(exc, tuple(args))
    init = _nearest_c(cls, "__init__")
    if init is not None and init is not object.__init__:
        with contextlib.suppress(Exception):  # args it does not take: `args` are set
            init(exc, *args)
    kept = [(k, v) for k, v in state.items() if not _is_dunder(k) or k == "__notes__"]
    store_attributes(exc, kept)
    return exc


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


# --------------------------------------------------------- builtin type subclasses


def build_builtin_subclass(cls: type, base: type, value: Any, state: dict[str, Any]) -> Any:
    """An instance of a subclass of a builtin type holding `value`: the C `__new__` with the
    value (immutable bases), or C `__new__` then the base's C `__init__` (list, dict, set,
    bytearray). The subclass's own `__new__`/`__init__` do not run."""
    if base in (list, dict, set, bytearray):
        obj = bare_instance(cls)
        init: Callable[..., None] = base.__init__
        try:
            init(obj, value)
        except Exception as exc:
            raise CannotRebuild(f"cannot fill {cls.__qualname__}: {exc}") from None
    else:
        obj = bare_instance(cls, value)
    if state:
        store_attributes(obj, [(k, v) for k, v in state.items() if not _is_dunder(k)])
    return obj
