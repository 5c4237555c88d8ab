"""Shapes LangGraph's own savers accept that ours once refused or read otherwise (issue
#15), through `LangGraphSaver`, on every saver and both APIs: a re-put under another
parent (kept under its stored parent, as LangGraph's PostgresSaver does: no loop), pending
sends of checkpoints older than format 4 (moved into the `__pregel_tasks` channel on
read, as LangGraph's PostgreSQL saver does), and NUL characters in metadata strings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

from checkpointer.errors import ParentMismatchError
from checkpointer.langgraph import LangGraphSaver
from checkpointer.types import TASKS, make_config
from tests.conftest import SAVER_KINDS, opened_saver


@pytest_asyncio.fixture(params=[(kind, api) for kind in SAVER_KINDS for api in ("sync", "async")])
async def lg(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    kind, api = request.param
    async with opened_saver(kind, tmp_path) as saver:
        yield Calls(LangGraphSaver(saver), api)


class Calls:
    """The adapter's sync API (from a worker thread: async savers serve sync calls only off
    their loop) or its async API, called alike."""

    def __init__(self, saver: LangGraphSaver, api: str) -> None:
        self.saver, self.api = saver, api

    async def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.api == "async":
            if name == "list":
                return [t async for t in self.saver.alist(*args, **kwargs)]
            return await getattr(self.saver, "a" + name)(*args, **kwargs)
        if name == "list":
            return await asyncio.to_thread(lambda: list(self.saver.list(*args, **kwargs)))
        return await asyncio.to_thread(getattr(self.saver, name), *args, **kwargs)


def _checkpoint(checkpoint_id: str) -> Any:
    cp = empty_checkpoint()
    cp["id"] = checkpoint_id
    return cp


async def test_a_re_put_under_another_parent_keeps_its_place(lg: Calls) -> None:
    config = make_config("t")
    a = await lg("put", config, _checkpoint("cid-a"), {"n": 1}, {})
    b = await lg("put", a, _checkpoint("cid-b"), {}, {})
    await lg("put_writes", a, [("ch", "on-a")], "task")
    # LangGraph's test re-puts a under its own child b: replaced, but not moved.
    await lg("put", b, _checkpoint("cid-a"), {"n": 2}, {})
    tup = await lg("get_tuple", a)
    assert tup.metadata["n"] == 2 and tup.parent_config is None
    assert tup.pending_writes == [("task", "ch", "on-a")]
    got = await lg("get_delta_channel_history", config=b, channels=["ch"])
    assert got["ch"] == {"writes": [("task", "ch", "on-a")]}
    assert [t.config["configurable"]["checkpoint_id"] for t in await lg("list", config)] == [
        "cid-b",
        "cid-a",
    ]
    # The saver under the adapter still refuses to move a checkpoint, with a typed error.
    inner = lg.saver.saver
    with pytest.raises(ParentMismatchError) as caught:
        if lg.api == "async":
            await inner.aput(b, _checkpoint("cid-a"), {}, {})
        else:
            await asyncio.to_thread(inner.put, b, _checkpoint("cid-a"), {}, {})
    assert caught.value.stored_parent_id is None and "cid-a" in str(caught.value)


async def test_pending_sends_of_an_old_format_read_as_the_tasks_channel(lg: Calls) -> None:
    config = make_config("thread-1")
    checkpoint_0 = empty_checkpoint()  # format 2
    config = await lg("put", config, checkpoint_0, {}, {})
    await lg("put_writes", config, [(TASKS, "send-1"), (TASKS, "send-2")], "task-1")
    await lg("put_writes", config, [(TASKS, "send-3"), ("other", "x")], "task-2")
    tuple_0 = await lg("get_tuple", config)
    assert tuple_0.checkpoint["channel_values"] == {}
    assert tuple_0.checkpoint["channel_versions"] == {}
    checkpoint_1 = create_checkpoint(checkpoint_0, {}, 1)
    checkpoint_1["channel_versions"] = {"a": "00000000000000000000000000000002.5"}
    config_1 = await lg("put", config, checkpoint_1, {}, {})
    sends = ["send-1", "send-2", "send-3"]
    thread = make_config("thread-1")
    for tup in (await lg("get_tuple", config_1), (await lg("list", thread))[0]):
        assert tup.checkpoint["channel_values"] == {TASKS: sends}
        assert tup.checkpoint["channel_versions"] == {
            "a": "00000000000000000000000000000002.5",
            TASKS: "00000000000000000000000000000002.5",  # the newest version it has
        }
    assert (await lg("list", thread))[-1].checkpoint["channel_values"] == {}
    # A checkpoint of the current format keeps its own channels: nothing is moved.
    checkpoint_2 = create_checkpoint(checkpoint_0, {}, 2)
    checkpoint_2["v"] = 4
    config_2 = await lg("put", config, checkpoint_2, {}, {})
    assert (await lg("get_tuple", config_2)).checkpoint["channel_values"] == {}


async def test_nul_in_metadata_strings_is_dropped_as_langgraph_does(lg: Calls) -> None:
    config = await lg("put", make_config("t"), _checkpoint("c1"), {"my_key": "\x00abc"}, {})
    assert (await lg("get_tuple", config)).metadata["my_key"] == "abc"
    found = await lg("list", None, filter={"my_key": "abc"})
    assert [t.metadata["my_key"] for t in found] == ["abc"]
