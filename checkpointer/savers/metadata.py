"""Metadata filtering, one rule for every saver, and the checks metadata passes first.

The rule (`list(filter=...)`): each filter key names a value in the metadata, a dotted key
(`"user.access-level"`) a path through nested objects, as LangGraph's SqliteSaver reads it;
the checkpoint matches when every named value exists and is *JSON-equal* to the filter's:
numbers by numeric value (`1 == 1.0`, `0 == -0.0`), booleans distinct from numbers, null
only null (a missing key is not null), strings exactly, lists element by element in order,
objects with the same keys, each value JSON-equal. That is what PostgreSQL's jsonb equality
gives; the SQLite statement and the in-memory saver implement the same, and a property
test holds all five savers to `json_equal` below.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from checkpointer.errors import ConfigError

MAX_METADATA_DEPTH = 100
"""How deeply metadata (and a filter value) may nest lists and objects. SQLite's JSON
functions stop at 1,000 levels and Python's encoder at its recursion limit; a fixed,
documented bound refuses the same input on every saver, with a typed error."""

FILTER_KEY_MAX = 256
_FILTER_KEY = re.compile(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*")


def too_deep(obj: Any, limit: int = MAX_METADATA_DEPTH) -> bool:
    """Whether `obj` nests lists/objects more than `limit` levels (iteratively: a deep
    value must not exhaust the stack while being measured)."""
    if not isinstance(obj, dict | list | tuple):
        return False
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        for child in children:
            if isinstance(child, dict | list | tuple):  # what the JSON encoder descends
                stack.append((child, depth + 1))
    return False


def filter_path(key: Any) -> tuple[str, ...]:
    """The path a filter key names: segments of letters, digits, `_` and `-`, joined by
    dots (a dotted key looks into nested objects). Anything else is a ConfigError."""
    if not isinstance(key, str) or len(key) > FILTER_KEY_MAX or not _FILTER_KEY.fullmatch(key):
        raise ConfigError(
            f"Invalid filter key {key!r} for metadata: use letters, digits, '_' or '-', with "
            f"'.' between the names of nested keys (at most {FILTER_KEY_MAX} characters)"
        )
    return tuple(key.split("."))


_MISSING = object()


def lookup(metadata: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value at `path` in decoded metadata, or `_MISSING`."""
    value: Any = metadata
    for name in path:
        if not isinstance(value, Mapping) or name not in value:
            return _MISSING
        value = value[name]
    return value


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality (see the module docstring); the reference every saver meets."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return False


def metadata_matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether decoded metadata passes a validated filter."""
    for key, wanted in filter.items():
        found = lookup(metadata, tuple(key.split(".")))
        if found is _MISSING or not json_equal(found, wanted):
            return False
    return True


# ---------------------------------------------------------------- NUL on PostgreSQL
NUL_ESCAPE = "\uffff"
"""jsonb cannot hold U+0000. The PostgreSQL saver stores metadata strings with NUL as
`NUL_ESCAPE + "0"` and the escape character itself doubled, which is reversible, and
injective, so escaped filter values still compare equal exactly when the originals do.
U+FFFF is a Unicode noncharacter: text meant for interchange does not use it."""

_ESCAPE_IN_JSON = re.compile(r"\uffff|(?<!\\)((?:\\\\)*)\\u0000")


def _escape_match(m: re.Match[str]) -> str:
    if m.group(0) == NUL_ESCAPE:
        return NUL_ESCAPE + NUL_ESCAPE
    return m.group(1) + NUL_ESCAPE + "0"


def escape_json_text(text: str) -> str:
    """JSON text (as `dumps_json` writes it: NUL as the escape `\\u0000`, U+FFFF raw) with
    every string's NUL and U+FFFF escaped for jsonb."""
    if NUL_ESCAPE not in text and "\\u0000" not in text:
        return text
    return _ESCAPE_IN_JSON.sub(_escape_match, text)


def _unescape_str(s: str) -> str:
    if NUL_ESCAPE not in s:
        return s
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch == NUL_ESCAPE and i + 1 < n and s[i + 1] in (NUL_ESCAPE, "0"):
            out.append("\x00" if s[i + 1] == "0" else NUL_ESCAPE)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def unescape_json_value(value: Any) -> Any:
    """Undo `escape_json_text` on a decoded JSON value (keys and strings)."""
    if isinstance(value, str):
        return _unescape_str(value)
    if isinstance(value, list):
        return [unescape_json_value(v) for v in value]
    if isinstance(value, dict):
        return {_unescape_str(k): unescape_json_value(v) for k, v in value.items()}
    return value
