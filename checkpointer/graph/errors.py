"""Errors the runtime raises on purpose (the channel and config errors live in
`checkpointer.errors`)."""

from __future__ import annotations

from checkpointer.errors import CheckpointerError


class GraphRecursionError(CheckpointerError, RecursionError):
    """A run took more supersteps than `config["recursion_limit"]` allows.

    Usually a loop whose exit condition is never met; raise the limit if the graph really
    needs that many steps.
    """


class GraphBuildError(CheckpointerError, ValueError):
    """The graph description is inconsistent (unknown node, missing entry point, ...)."""


class EmptyInputError(CheckpointerError, ValueError):
    """A `Command(resume=...)` was given but nothing is waiting for an answer."""
