"""Stored values as HTML a person can read, every piece of text escaped.

Values go through `checkpointer.cli.render.jsonable` first (the display form the CLI's
`--json` uses: never raises, tags what JSON cannot hold), then become nested lists and
tables. Nothing from a value reaches the page unescaped: a `<script>` in state shows as the
text `<script>`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from checkpointer.channels import MISSING
from checkpointer.cli.render import jsonable

LONG_TEXT = 600
"""Strings longer than this fold behind a <details>."""
MAX_ITEMS = 500
"""Items of one list or dict drawn; the rest are counted, not drawn."""


def _is_message(value: Any) -> bool:
    """A chat message in one of the usual shapes ({role, content} or LangChain's dump)."""
    return (
        isinstance(value, Mapping)
        and "content" in value
        and isinstance(value.get("role", value.get("type")), str)
    )


def _text(value: str) -> Markup:
    if len(value) <= LONG_TEXT:
        return Markup('<span class="v-str">{}</span>').format(value)
    return Markup(
        '<details class="v-long"><summary><span class="v-str">{}</span>… '
        '({} characters)</summary><span class="v-str">{}</span></details>'
    ).format(value[:200], len(value), value)


def _scalar(value: Any) -> Markup:
    if value is None:
        return Markup('<span class="v-none">None</span>')
    if isinstance(value, bool):
        return Markup('<span class="v-bool">{}</span>').format(str(value))
    if isinstance(value, int | float):
        return Markup('<span class="v-num">{}</span>').format(repr(value))
    if isinstance(value, str):
        return _text(value)
    return Markup('<span class="v-other">{}</span>').format(repr(value))


def _message(value: Mapping[str, Any], depth: int) -> Markup:
    role = str(value.get("role", value.get("type")))
    content = value.get("content")
    extra = {k: v for k, v in value.items() if k not in ("role", "type", "content")}
    body = _text(content) if isinstance(content, str) else _html(content, depth + 1)
    more = Markup("")
    if extra:
        more = Markup('<div class="v-msg-extra">{}</div>').format(_html(extra, depth + 1))
    return Markup(
        '<div class="v-msg" data-role="{}"><span class="v-role">{}</span>{}{}</div>'
    ).format(role, role, body, more)


def _html(value: Any, depth: int) -> Markup:
    if isinstance(value, Mapping):
        if _is_message(value):
            return _message(value, depth)
        if not value:
            return Markup('<span class="v-empty">{}</span>')
        rows = [
            Markup("<tr><th>{}</th><td>{}</td></tr>").format(k, _html(v, depth + 1))
            for k, v in list(value.items())[:MAX_ITEMS]
        ]
        if len(value) > MAX_ITEMS:
            rows.append(
                Markup("<tr><td colspan=2>… {} more keys</td></tr>").format(len(value) - MAX_ITEMS)
            )
        return Markup('<table class="v-dict">{}</table>').format(Markup("").join(rows))
    if isinstance(value, list):
        return items_html(value, start=0, depth=depth)
    return _scalar(value)


def items_html(items: Sequence[Any], *, start: int, depth: int = 0) -> Markup:
    """An ordered list numbered from `start` (the index of the first item shown)."""
    if not items:
        return Markup('<span class="v-empty">[]</span>')
    shown = [
        Markup('<li value="{}">{}</li>').format(start + i, _html(jsonable(v), depth + 1))
        for i, v in enumerate(items[:MAX_ITEMS])
    ]
    if len(items) > MAX_ITEMS:
        shown.append(
            Markup('<li class="v-more">… {} more items</li>').format(len(items) - MAX_ITEMS)
        )
    return Markup('<ol class="v-list" start="{}">{}</ol>').format(start, Markup("").join(shown))


def value_html(value: Any) -> Markup:
    """Any stored value (a Python object) as escaped HTML."""
    if value is MISSING:
        return Markup('<span class="v-none">(no value)</span>')
    return _html(jsonable(value), 0)


def list_change(a: Any, b: Any) -> tuple[int, list[Any], list[Any]] | None:
    """For two lists: (items in common at the start, A's items after them, B's items after
    them); None when either is not a list. A list that only grew has nothing after on A."""
    if a is MISSING:
        a = []
    if not isinstance(a, list | tuple) or not isinstance(b, list | tuple):
        return None
    prefix = 0
    limit = min(len(a), len(b))
    while prefix < limit and a[prefix] == b[prefix]:
        prefix += 1
    return prefix, list(a[prefix:]), list(b[prefix:])
