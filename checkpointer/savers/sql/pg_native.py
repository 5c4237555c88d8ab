"""Long statements in PostgreSQL's own placeholder form (`$1`, `$2`...), converted once.

The dialect writes psycopg's placeholders (`%(name)s`), which psycopg turns into `$n` on
every execute, caching that work only for statements of at most 4,096 bytes and 50
parameters. A delta history statement is 8 KB for one channel and 19 KB for three:
psycopg parsed it again on every call, 0.1 to 0.25 ms. The executors convert such a text
once here (the dialect hands out the same string object for a statement it built before,
so the lookup hashes nothing new) and run it on a raw variant of the connection's own
cursor class, which sends a query as it is; a `cursor_factory` (tracing, statement
counting) sees these statements as it sees the others. Shorter statements, and any with a
placeholder other than `%(name)s` (`%(name)b` asks for binary parameters, which a raw
cursor cannot), go through psycopg as before.

The conversion keeps what psycopg would have sent: a name used twice is one parameter, and
`%%` is a literal `%`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final

PSYCOPG_CACHED_BYTES: Final = 4096
PSYCOPG_CACHED_PARAMS: Final = 50
"""The largest statement psycopg keeps its conversion of (`psycopg._queries`)."""

_PLACEHOLDER: Final = re.compile(r"%(?:\((?P<name>[^)]+)\)s|(?P<other>.|$))", re.DOTALL)
"""`%(name)s`, else `%` and the character after it (`%` for a literal one)."""


@lru_cache(maxsize=256)
def _converted(sql: str) -> tuple[bytes, tuple[str, ...]] | None:
    """(the query in `$n` form, the parameter names in `$n` order), or None for a text
    with any placeholder but `%(name)s` and `%%`."""
    names: list[str] = []
    number: dict[str, int] = {}
    unsupported = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unsupported
        name = match.group("name")
        if name is None:
            unsupported = unsupported or match.group("other") != "%"
            return "%"
        if name not in number:
            names.append(name)
            number[name] = len(names)
        return f"${number[name]}"

    query = _PLACEHOLDER.sub(replace, sql)
    return None if unsupported else (query.encode(), tuple(names))


def native(sql: str, params: Any) -> tuple[bytes, list[Any]] | None:
    """`sql` and its named `params` in `$n` form, when psycopg would not keep its own
    conversion of them (and they convert); None: execute them through psycopg as they are.
    A parameter the statement names and `params` lacks is psycopg's error."""
    if not isinstance(params, Mapping) or (
        len(sql) <= PSYCOPG_CACHED_BYTES and len(params) <= PSYCOPG_CACHED_PARAMS
    ):
        return None
    converted = _converted(sql)
    if converted is None:
        return None
    query, names = converted
    try:
        return query, [params[name] for name in names]
    except KeyError as exc:
        from psycopg import ProgrammingError

        raise ProgrammingError(f"query parameter missing: {exc.args[0]}") from None


_RAW_CLASSES: dict[type, type] = {}


def raw_cursor_class(cursor_class: type) -> type:
    """`cursor_class` (a connection's `cursor_factory`, sync or async) sending its queries
    as written, as psycopg's `RawCursor` does for its plain cursor (made once per class)."""
    raw = _RAW_CLASSES.get(cursor_class)
    if raw is None:
        from psycopg.raw_cursor import RawCursorMixin

        raw = type(f"Raw{cursor_class.__name__}", (RawCursorMixin, cursor_class), {})
        _RAW_CLASSES[cursor_class] = raw
    return raw
