"""Result rows and the targets of the benchmark issue.

A row is one metric of one cell (workload, backend, variant, N): the median of each side's
samples, their ratio ours/reference, and the target it is held to, if any.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.targets import Target, ratio_of, target_for


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
        return ratio_of(self.ours, self.ref)

    @property
    def status(self) -> str:
        if self.target is None:
            return ""
        if not self.ours_samples and not self.ref_samples:
            return "not measured"
        ok = self.target.check(self.ours, self.ref)
        if ok is None:
            return "not measured"
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
    # floors: ours against the raw driver (the "reference" column holds the floor)
    "put_floor": ("put + put_writes per step vs raw-driver floor", "ms"),
    "delta_floor": ("get_delta_channel_history vs raw-driver floor", "ms"),
    # growth: the "ours"/"reference" columns hold each side's own growth
    "tuple_one": ("get_tuple, 1 thread in the store", "ms"),
    "tuple_many": ("get_tuple of a random thread, many threads", "ms"),
    "tuple_growth": ("get_tuple growth, many threads / 1 thread", "x"),
    "list_one": ("list of one thread, 1 thread in the store", "ms"),
    "list_many": ("list of a random thread, many threads", "ms"),
    "list_growth": ("list growth, many threads / 1 thread", "x"),
    "tuple_same": ("get_tuple of the first thread again, many threads", "ms"),
    "list_same": ("list of the first thread again, many threads", "ms"),
    "list_per_ckpt_short": ("list per checkpoint, short thread (STEPS / 10)", "µs"),
    "list_per_ckpt_long": ("list per checkpoint, long thread (--long-thread STEPS)", "µs"),
    "list_step_growth": ("list per checkpoint growth, long / short thread", "x"),
    "long_build_per_step": ("long thread built through LangGraph, per step", "ms"),
    "long_store_bytes": ("bytes on disk, long and short thread", "MB"),
}


def chat_target(column: str, variant: str, n: int, metric: str, large_n: int) -> Target | None:
    return target_for("chat", column, variant, n, metric, large_n)


def concurrency_target(backend: str, metric: str) -> Target | None:
    return target_for("concurrency", backend, "delta100", None, metric, 0)


def runtime_target(variant: str, n: int, metric: str, large_n: int) -> Target | None:
    return target_for("runtime", "sqlite", variant, n, metric, large_n)
