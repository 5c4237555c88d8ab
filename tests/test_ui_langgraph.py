"""The viewer on databases written by LangGraph's own SQLite and Postgres savers, read
through the CLI's reader (`open_reader` -> `LangGraphReader`): the tree with its fork, the
state with the delta channel rebuilt (with the graph's reducers), the diff, the waiting
interrupt, export; every action refused (page and server); the database unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from starlette.testclient import TestClient

from checkpointer.cli.graphs import load_graph
from checkpointer.cli.render import jsonable
from checkpointer.ui.app import create_app
from checkpointer.ui.data import ReaderSource, ReadOnlyError, open_source
from checkpointer.ui.security import allowed_hosts
from tests.test_cli_langgraph_db import SCHEMAS, LgDb
from tests.test_cli_langgraph_db import lg as lg  # the LangGraph databases fixture

PORT = 8998
BASE = f"http://127.0.0.1:{PORT}"
TOKEN = "lg-token-0123456789"


def url_and_schema(lg: LgDb) -> tuple[str, str | None]:
    """The fixture's CLI arguments (`--url U [--schema S]`) as open_source takes them."""
    args = dict(zip(lg.args[::2], lg.args[1::2], strict=True))
    return args["--url"], args.get("--schema")


@pytest.fixture
def source(lg: LgDb) -> Iterator[ReaderSource]:
    url, schema = url_and_schema(lg)
    specs = dict(load_graph(SCHEMAS["fork"]).channels)
    with open_source(url, schema=schema, specs=specs) as opened:
        yield opened


def _client(source: ReaderSource) -> TestClient:
    app = create_app(source, token=TOKEN, hosts=allowed_hosts("127.0.0.1", PORT), port=PORT)
    client = TestClient(app, base_url=BASE, follow_redirects=False)
    client.cookies.set(f"checkpointer_ui_{PORT}", TOKEN)
    return client


def _cid(config: Any) -> str:
    return str(config["configurable"]["checkpoint_id"])


def rebuilt_checkpoint(graph: Any) -> tuple[str, str, Any]:
    """(checkpoint, its parent, its messages) for the newest checkpoint of the fork thread
    whose message list is not a stored snapshot but replayed, and that appended to it."""
    snapshots = list(graph.get_state_history({"configurable": {"thread_id": "fork"}}))
    return next(
        (_cid(s.config), _cid(s.parent_config), s.values["messages"])
        for s, parent in pairwise(snapshots)
        if s.parent_config is not None
        and s.metadata["source"] == "loop"
        and len(s.values["messages"]) > len(parent.values.get("messages", []))
        and _cid(s.parent_config) == _cid(parent.config)
        and s.metadata.get("counters_since_delta_snapshot", {}).get("messages")
    )


def test_the_viewer_reads_a_langgraph_database_read_only(
    lg: LgDb,
    source: ReaderSource,
) -> None:
    before = lg.fingerprint()
    assert source.reader.kind == "langgraph" and source.read_only
    client = _client(source)
    listing = client.get("/?sort=id").text
    assert "3 thread(s)" in listing and "read-only" in listing
    assert listing.index(">approval<") < listing.index(">fork<") < listing.index(">sub<")
    assert "2 thread(s)" in client.get("/?q=O").text  # fork, approval: case-insensitive

    page = client.get("/?thread=fork")
    assert page.status_code == 200
    assert "branch from step" in page.text and "copy thread…" not in page.text
    tree = source.tree("fork", "")
    graph = lg.graphs["fork"]
    expected_ids = {
        _cid(s.config) for s in graph.get_state_history({"configurable": {"thread_id": "fork"}})
    }
    assert set(tree.nodes) == expected_ids and len(tree.heads) == 2

    # A checkpoint whose message list LangGraph did not store: rebuilt by the reducer.
    cid, parent, messages = rebuilt_checkpoint(graph)
    view = source.state("fork", "", cid)
    assert view.channels["messages"].kind == "rebuilt"
    assert jsonable(view.channels["messages"].value) == jsonable(messages)
    fragment = client.get(f"/frag/checkpoint?thread=fork&c={cid}").text
    assert "rebuilt delta" in fragment and messages[-1].content in fragment
    assert fragment.count('disabled title="the database is open read-only"') == 2
    # Its diff against the parent shows what the step appended.
    assert 'class="diff"' in fragment and "appended" in fragment
    diff = source.diff("fork", "", parent, cid)
    change = next(c for c in diff.channels if c.channel == "messages")
    assert change.b is not None and change.a is not None
    assert len(change.b.value) > len(change.a.value)

    waiting = client.get("/?thread=approval").text
    assert "⏸ waiting" in waiting
    exported = client.get("/export?thread=fork")
    assert exported.status_code == 200 and exported.text.count("\n") > len(expected_ids)

    for path in ("/api/fork", "/api/copy-branch", "/api/copy-thread"):
        response = client.post(
            path,
            json={"confirm": True, "thread": "fork", "checkpoint": cid, "target": "t2"},
            headers={"origin": BASE},
        )
        assert response.status_code == 403 and "read-only" in response.json()["error"]
    with pytest.raises(ReadOnlyError):
        source.fork("fork", "", cid)
    assert lg.fingerprint() == before
