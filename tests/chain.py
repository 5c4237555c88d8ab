"""A scripted runtime for tests: drives the replay engine and a saver step by step.

It saves exactly as a graph runtime does: each step's task writes are pending writes on the
checkpoint the tasks read, then the new checkpoint is saved with that one as its parent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from checkpointer.channels import BaseChannel, DeltaChannel, get_overwrite
from checkpointer.ids import task_id_for
from checkpointer.replay import (
    TaskWrites,
    apply_writes,
    channels_from_checkpoint,
    create_checkpoint,
    plan_delta_snapshots,
    read_channel_values,
)
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.types import (
    CheckpointMetadata,
    RunnableConfig,
    checkpoint_id_of,
    empty_checkpoint,
    make_config,
)


class ChainDriver:
    """Runs steps of scripted writes against `specs`, saving each checkpoint to `saver`."""

    def __init__(
        self,
        saver: BaseCheckpointSaver,
        specs: Mapping[str, BaseChannel],
        thread_id: str = "thread",
        checkpoint_ns: str = "",
        *,
        max_supersteps: int | None = None,
    ) -> None:
        self.saver = saver
        self.specs = dict(specs)
        self.max_supersteps = max_supersteps
        self.config: RunnableConfig = make_config(thread_id, checkpoint_ns)
        self.checkpoint = empty_checkpoint()
        self.metadata: CheckpointMetadata = {}
        self.channels = {k: spec.from_checkpoint(_missing()) for k, spec in self.specs.items()}
        self.step = -1
        self.forced: set[str] = set()
        self.saved: list[tuple[RunnableConfig, dict[str, Any]]] = []

    def run_step(self, tasks: Sequence[Sequence[tuple[str, Any]]]) -> RunnableConfig:
        """One superstep: each inner sequence is one task's writes."""
        step_tasks = [
            TaskWrites(
                name=f"node{i}",
                writes=list(writes),
                triggers=("trigger",),
                path=f"{i:04d}",
            )
            for i, writes in enumerate(tasks)
        ]
        if checkpoint_id_of(self.config) is not None:
            for task in step_tasks:
                self.saver.put_writes(
                    self.config,
                    task.writes,
                    task_id_for(self.step + 1, str(checkpoint_id_of(self.config)), task.path),
                    task_path=task.path,
                )
        previous_versions = dict(self.checkpoint["channel_versions"])
        updated = apply_writes(
            self.checkpoint, self.channels, step_tasks, self.saver.get_next_version
        )
        overwritten = {
            ch
            for task in step_tasks
            for ch, value in task.writes
            if isinstance(self.specs.get(ch), DeltaChannel) and get_overwrite(value)[0]
        }
        plan = plan_delta_snapshots(
            self.channels,
            self.metadata,
            updated,
            self.checkpoint["channel_versions"],
            forced=self.forced | overwritten,
            root=checkpoint_id_of(self.config) is None,
            max_supersteps=self.max_supersteps,
        )
        self.forced = set()
        self.step += 1
        checkpoint = create_checkpoint(
            self.checkpoint,
            self.channels,
            self.step,
            updated_channels=updated,
            get_next_version=self.saver.get_next_version,
            channels_to_snapshot=plan.to_snapshot,
            stored_versions=previous_versions,
        )
        metadata = plan.apply_to({"source": "loop", "step": self.step, "parents": {}})
        new_versions = {
            k: v for k, v in checkpoint["channel_versions"].items() if previous_versions.get(k) != v
        }
        self.config = self.saver.put(self.config, checkpoint, metadata, new_versions)
        self.checkpoint = checkpoint
        self.metadata = metadata
        self.saved.append((self.config, read_channel_values(self.channels)))
        return self.config

    def fork_from(self, config: RunnableConfig) -> RunnableConfig:
        """Start a new branch at an earlier checkpoint, as a runtime's fork does.

        The fork's first checkpoint copies the old state and snapshots every delta channel:
        the old checkpoint's pending writes belong to its original child, and a history walk
        from the fork must not replay them.
        """
        tup = self.saver.get_tuple(config)
        assert tup is not None
        self.channels = channels_from_checkpoint(
            self.specs, tup.checkpoint, saver=self.saver, config=tup.config
        )
        delta = {k for k, spec in self.specs.items() if isinstance(spec, DeltaChannel)}
        plan = plan_delta_snapshots(
            self.channels, tup.metadata, (), tup.checkpoint["channel_versions"], forced=delta
        )
        self.step = tup.metadata.get("step", 0)
        checkpoint = create_checkpoint(
            tup.checkpoint,
            self.channels,
            self.step,
            get_next_version=self.saver.get_next_version,
            channels_to_snapshot=plan.to_snapshot,
            stored_versions=tup.checkpoint["channel_versions"],
        )
        metadata = plan.apply_to({"source": "fork", "step": self.step, "parents": {}})
        new_versions = {
            k: v
            for k, v in checkpoint["channel_versions"].items()
            if tup.checkpoint["channel_versions"].get(k) != v
        }
        self.config = self.saver.put(tup.config, checkpoint, metadata, new_versions)
        self.checkpoint = checkpoint
        self.metadata = metadata
        self.saved.append((self.config, read_channel_values(self.channels)))
        return self.config


def values_at(
    saver: BaseCheckpointSaver, specs: Mapping[str, BaseChannel], config: RunnableConfig
) -> dict[str, Any]:
    """The state a reader sees at `config`, rebuilt from storage alone."""
    tup = saver.get_tuple(config)
    assert tup is not None, f"no checkpoint at {config}"
    channels = channels_from_checkpoint(specs, tup.checkpoint, saver=saver, config=tup.config)
    return read_channel_values(channels)


def _missing() -> Any:
    from checkpointer.channels import MISSING

    return MISSING
