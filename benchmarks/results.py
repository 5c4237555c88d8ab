"""Result rows and the targets of the benchmark issue.

A row is one metric of one cell (workload, backend, variant, N): the median of each side's
samples, their ratio ours/reference, and the target it is held to, if any.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from benchmarks.backends import POSTGRES_BACKENDS, SQL_BACKENDS, SQLITE_BACKENDS

TargetKind = Literal["ratio<=", "ratio>=", "ours=="]


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    value: float

    def check(self, ours: float | None, ref: float | None) -> bool | None:
        if self.kind == "ours==":
            return None if ours is None else ours == self.value
        ratio = _ratio(ours, ref)
        if ratio is None:
            return None
        return ratio <= self.value if self.kind == "ratio<=" else ratio >= self.value

    def __str__(self) -> str:
        if self.kind == "ours==":
            return f"ours = {self.value:g}"
        sign = "≤" if self.kind == "ratio<=" else "≥"
        return f"{sign} {self.value:g}"


def _ratio(ours: float | None, ref: float | None) -> float | None:
    if ours is None or ref is None:
        return None
    if ref == 0:
        return None if ours != 0 else 1.0
    return ours / ref


@dataclass
class Row:
    workload: str
    backend: str
    variant: str
    n: int | None
    metric: str
    unit: str
    ours_samples: list[float] = field(default_factory=list)
    ref_samples: list[float] = field(default_factory=list)
    target: Target | None = None
    note: str = ""

    @property
    def ours(self) -> float | None:
        return statistics.median(self.ours_samples) if self.ours_samples else None

    @property
    def ref(self) -> float | None:
        return statistics.median(self.ref_samples) if self.ref_samples else None

    @property
    def ratio(self) -> float | None:
        return _ratio(self.ours, self.ref)

    @property
    def status(self) -> str:
        if self.target is None:
            return ""
        ok = self.target.check(self.ours, self.ref)
        if ok is None:
            return "n/a"
        return "PASS" if ok else "MISS"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["target"] = (
            None if self.target is None else {**asdict(self.target), "text": str(self.target)}
        )
        out.update(ours=self.ours, ref=self.ref, ratio=self.ratio, status=self.status)
        return out


METRICS: dict[str, tuple[str, str]] = {
    # key: (label, unit)
    "wall": ("wall time, N steps (invoke)", "s"),
    "put": ("put + put_writes per step", "ms"),
    "stmts_step": ("SQL statements per step (whole invoke)", "stmts"),
    "bytes": ("bytes on disk", "MB"),
    "get_state": ("get_state at the head", "ms"),
    "get_tuple": ("get_tuple at the head", "ms"),
    "get_tuple_stmts": ("get_tuple at the head: statements", "stmts"),
    "get_state_stmts": ("get_state at the head: statements", "stmts"),
    "list": ("saver list, whole thread", "s"),
    "list_stmts": ("saver list, whole thread: statements", "stmts"),
    "delta": ("get_delta_channel_history at the head", "ms"),
    "delta_stmts": ("get_delta_channel_history: statements", "stmts"),
    "history": ("get_state_history, whole thread", "s"),
    "history_stmts": ("get_state_history: statements", "stmts"),
    "throughput": ("throughput", "steps/s"),
    "errors": ("errors", "count"),
    "client_cpu": ("client CPU per step", "ms"),
    "runtime_wall": ("wall time, N steps (invoke)", "s"),
    "runtime_get_state": ("get_state at the head", "ms"),
    "runtime_history": ("get_state_history, whole thread", "s"),
    "runtime_bytes": ("bytes on disk", "MB"),
}


def chat_target(backend: str, variant: str, n: int, metric: str, large_n: int) -> Target | None:
    """The issue's targets for workload 1. `large_n` is where "1,000 checkpoints" targets
    are held (1000, or the largest N of a shorter run)."""
    delta = variant != "classic"
    big = n >= large_n
    if metric == "put":
        if backend in POSTGRES_BACKENDS and variant == "classic":
            return Target("ratio<=", 0.5)
        return Target("ratio<=", 1.0)
    if metric == "get_state" and delta:
        return Target("ratio<=", 0.6)
    if metric == "get_tuple_stmts" and backend in SQL_BACKENDS:
        return Target("ours==", 1)
    if metric == "bytes" and backend in SQLITE_BACKENDS:
        return Target("ratio<=", 1.0 if delta else 0.35)
    if metric == "list" and big:
        return Target("ratio<=", 0.5)
    if metric == "list_stmts" and big and backend in SQL_BACKENDS:
        return Target("ours==", 1)
    if metric == "delta" and variant == "delta_never" and big and backend in SQL_BACKENDS:
        return Target("ratio<=", 0.3)
    if metric == "delta_stmts" and delta and backend in SQL_BACKENDS:
        return Target("ours==", 1)
    return None


def concurrency_target(backend: str, metric: str) -> Target | None:
    if backend.startswith("async_postgres"):
        if metric == "throughput":
            return Target("ratio>=", 3.0)
        if metric == "errors":
            return Target("ours==", 0)
    return None


def runtime_target(variant: str, n: int, metric: str, large_n: int) -> Target | None:
    if metric == "runtime_history" and variant != "classic" and n >= large_n:
        return Target("ratio<=", 0.1)
    return None
