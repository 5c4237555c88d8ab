"""The targets, as data: one table (`GOALS`) that the harness and the report both read.

A goal names a workload, a metric, the report columns and variants it holds for, where in
N it is held ("large": only at the run's large N, the issue's N = 1,000; "any": every N;
"none": the metric has no N), and the target. Goals from issue #17 must get a verdict in
every run that requests their column: a cell that could not run is reported as
"not measured", never silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

TargetKind = Literal["ratio<=", "ratio>=", "ours==", "ours<="]
Where = Literal["large", "any", "none"]


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    value: float

    def check(self, ours: float | None, ref: float | None) -> bool | None:
        """True/False, or None when there is nothing to judge."""
        if self.kind == "ours==":
            return None if ours is None else ours == self.value
        if self.kind == "ours<=":
            return None if ours is None else ours <= self.value
        ratio = ratio_of(ours, ref)
        if ratio is None:
            return None
        return ratio <= self.value if self.kind == "ratio<=" else ratio >= self.value

    @property
    def on_ours(self) -> bool:
        """The target judges our value itself, not the ratio to the reference."""
        return self.kind in ("ours==", "ours<=")

    def __str__(self) -> str:
        if self.kind == "ours==":
            return f"ours = {self.value:g}"
        if self.kind == "ours<=":
            return f"ours ≤ {self.value:g}"
        sign = "≤" if self.kind == "ratio<=" else "≥"
        return f"{sign} {self.value:g}"


def ratio_of(ours: float | None, ref: float | None) -> float | None:
    if ours is None or ref is None:
        return None
    if ref == 0:
        return None if ours != 0 else 1.0
    return ours / ref


# Report columns (one per saver configuration), in table order.
MEMORY = ("memory",)
SQLITE_EQUAL = ("sqlite_full", "async_sqlite")  # ours at synchronous=FULL, like the reference
PG = ("postgres", "async_postgres")
SQL_EQUAL = SQLITE_EQUAL + PG
SQL_ALL = ("sqlite", *SQL_EQUAL)
CLASSIC_DELTA = ("classic", "delta100")
EVERY = ("classic", "delta100", "delta_never")
GROWTH_COLUMNS = ("sqlite", "postgres")
FLAT = Target("ours<=", 1.5)
ONE = Target("ours==", 1)
DELTAS = ("delta100", "delta_never")


@dataclass(frozen=True)
class Goal:
    workload: str
    metric: str
    columns: tuple[str, ...]
    variants: tuple[str, ...]
    target: Target
    where: Where = "large"
    source: str = "#17"


def _le(value: float) -> Target:
    return Target("ratio<=", value)


GOALS: tuple[Goal, ...] = (
    # Issue #17: ours / reference, same run, equal durability, N = 1,000.
    Goal("chat", "put", SQLITE_EQUAL, CLASSIC_DELTA, _le(0.8)),
    Goal("chat", "put", PG, CLASSIC_DELTA, _le(0.7)),
    Goal("chat", "put", MEMORY, CLASSIC_DELTA, _le(1.0)),
    Goal("chat", "get_tuple", SQL_EQUAL, CLASSIC_DELTA, _le(0.8)),
    Goal("chat", "get_state", SQL_EQUAL, ("delta100",), _le(0.5)),
    Goal("chat", "get_state", SQL_EQUAL, ("classic",), _le(0.7)),
    Goal("chat", "get_state", MEMORY, CLASSIC_DELTA, _le(0.6)),
    Goal("chat", "history", SQL_EQUAL, EVERY, _le(0.5)),
    Goal("chat", "list", SQL_EQUAL + MEMORY, EVERY, _le(0.5)),
    Goal("chat", "delta", SQL_EQUAL, ("delta_never",), _le(0.3)),
    Goal("chat", "bytes", PG, ("classic",), _le(0.5)),
    # Growth: our time with many threads (or a long thread) over our time with one.
    Goal("growth", "tuple_growth", GROWTH_COLUMNS, ("delta100",), FLAT, "none"),
    Goal("growth", "list_growth", GROWTH_COLUMNS, ("delta100",), FLAT, "none"),
    Goal("growth", "list_step_growth", GROWTH_COLUMNS, ("delta100",), FLAT, "none"),
    # Physical floors: ours / the raw driver doing the least the operation needs.
    Goal("floor", "put_floor", SQL_EQUAL, CLASSIC_DELTA, _le(2.0)),
    Goal("floor", "delta_floor", SQL_EQUAL, ("delta_never",), _le(2.0)),
    # Earlier issues, kept.
    Goal("chat", "get_tuple_stmts", SQL_ALL, EVERY, ONE, "any", "earlier"),
    Goal("chat", "list_stmts", SQL_ALL, EVERY, ONE, "large", "earlier"),
    Goal("chat", "delta_stmts", SQL_ALL, DELTAS, ONE, "any", "earlier"),
    Goal("chat", "bytes", SQLITE_EQUAL, ("classic",), _le(0.35), "any", "earlier"),
    Goal("chat", "bytes", SQLITE_EQUAL, DELTAS, _le(1.0), "any", "earlier"),
    Goal(
        "concurrency",
        "throughput",
        ("async_postgres_pool", "async_postgres_pool+1ms"),
        ("delta100",),
        Target("ratio>=", 3.0),
        "none",
        "earlier",
    ),
    Goal(
        "concurrency",
        "errors",
        ("async_postgres_pool", "async_postgres_pool+1ms"),
        ("delta100",),
        Target("ours==", 0),
        "none",
        "earlier",
    ),
    Goal("runtime", "runtime_history", ("sqlite",), DELTAS, _le(0.1), "large", "earlier"),
)  # fmt: skip


def _applies(goal: Goal, n: int | None, large_n: int) -> bool:
    if goal.where == "none":
        return True
    if goal.where == "large":
        return n is not None and n >= large_n
    return n is not None


def target_for(
    workload: str, column: str, variant: str, n: int | None, metric: str, large_n: int
) -> Target | None:
    """The target a measurement is held to, or None (the first goal that matches)."""
    for goal in GOALS:
        if (
            goal.workload == workload
            and goal.metric == metric
            and column in goal.columns
            and variant in goal.variants
            and _applies(goal, n, large_n)
        ):
            return goal.target
    return None


@dataclass(frozen=True)
class Expected:
    """A verdict the report owes: this goal, in this cell."""

    workload: str
    column: str
    variant: str
    n: int | None
    metric: str
    target: Target


def expected_verdicts(
    columns: Iterable[str], variants: Iterable[str], large_n: int, workloads: Iterable[str]
) -> list[Expected]:
    """Every issue-#17 verdict a run over these columns and variants must print."""
    columns, variants, workloads = set(columns), set(variants), set(workloads)
    out = []
    for goal in GOALS:
        if goal.source != "#17":
            continue
        if goal.workload == "chat" and "chat" not in workloads:
            continue
        if goal.workload == "floor" and not {"chat", "floor"} <= workloads:
            continue
        if goal.workload == "growth" and "growth" not in workloads:
            continue
        n = None if goal.where == "none" else large_n
        for column in goal.columns:
            for variant in goal.variants:
                # The growth cell runs its own variant, whatever --variants says.
                if column in columns and (variant in variants or goal.workload == "growth"):
                    out.append(
                        Expected(goal.workload, column, variant, n, goal.metric, goal.target)
                    )
    return out
