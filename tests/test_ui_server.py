"""The viewer's HTTP side, without a browser: token, host and origin checks, escaping,
actions through the library, read-only databases, thread paging."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from checkpointer.export import import_threads
from checkpointer.graph import END, START, StateGraph
from checkpointer.inspect import Database
from checkpointer.savers.sql.inspect import existing_threads_plan
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint, make_config
from checkpointer.ui.app import create_app
from checkpointer.ui.data import ReaderSource, ReadOnlyError
from checkpointer.ui.security import allowed_hosts
from checkpointer.ui.tree import Run
from tests.ui_support import (
    SCRIPT,
    SCRIPT_THREAD,
    WAITING_THREAD,
    NoteState,
    add_script_thread,
    add_waiting_thread,
    build_demo,
    copy_db,
    source_on,
)

PORT = 8999
BASE = f"http://127.0.0.1:{PORT}"
TOKEN = "test-token-0123456789"


@pytest.fixture(scope="module")
def demo_master(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("ui") / "demo.db"
    thread = build_demo(path)
    add_script_thread(path)
    add_waiting_thread(path)
    return path, thread


@pytest.fixture
def demo(demo_master: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """A private copy: tests that fork must not change what the others see."""
    return copy_db(demo_master[0], tmp_path / "demo.db"), demo_master[1]


def _client(source: ReaderSource, *, authed: bool = True) -> TestClient:
    app = create_app(source, token=TOKEN, hosts=allowed_hosts("127.0.0.1", PORT), port=PORT)
    client = TestClient(app, base_url=BASE, follow_redirects=False)
    if authed:
        client.cookies.set(f"checkpointer_ui_{PORT}", TOKEN)
    return client


@pytest.fixture
def client(demo: tuple[Path, str]) -> Iterator[TestClient]:
    with source_on(demo[0]) as source:
        yield _client(source)


def test_every_request_needs_the_token(demo: tuple[Path, str]) -> None:
    with source_on(demo[0]) as source:
        anon = _client(source, authed=False)
        for path in ("/", "/static/ui.js", f"/frag/checkpoint?thread={demo[1]}", "/export"):
            assert anon.get(path).status_code == 403, path
        assert anon.get("/?token=wrong").status_code == 403
        anon.cookies.set(f"checkpointer_ui_{PORT}", "wrong")
        assert anon.get("/").status_code == 403
        assert anon.post("/api/fork", json={"confirm": True}).status_code == 403


def test_the_token_in_the_url_becomes_a_cookie(demo: tuple[Path, str]) -> None:
    with source_on(demo[0]) as source:
        anon = _client(source, authed=False)
        first = anon.get(f"/?token={TOKEN}&thread={demo[1]}")
        assert first.status_code == 303
        assert first.headers["location"] == f"/?thread={demo[1]}"
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
        page = anon.get(first.headers["location"])
        assert page.status_code == 200 and demo[1] in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]


def test_a_foreign_host_header_is_refused(client: TestClient) -> None:
    assert client.get("/", headers={"host": "evil.example:8999"}).status_code == 403
    assert client.get("/", headers={"host": f"localhost:{PORT}"}).status_code == 200


def test_cross_origin_writes_are_refused(client: TestClient, demo: tuple[Path, str]) -> None:
    body = {"confirm": True, "thread": demo[1], "ns": "", "checkpoint": "x"}
    for headers in (
        {"origin": "http://evil.example"},
        {"origin": f"http://127.0.0.1:{PORT + 1}"},
        {"origin": "null"},
        {},  # no Origin and no Referer: not provably ours
        {"referer": "http://evil.example/page"},
    ):
        response = client.post("/api/fork", json=body, headers=headers)
        assert response.status_code == 403, headers
        assert "cross-origin" in response.text
    # Same origin passes the guard (and then fails on the bad checkpoint id).
    ok = client.post("/api/fork", json=body, headers={"origin": BASE})
    assert ok.status_code == 404, ok.text


def test_values_are_escaped(client: TestClient) -> None:
    page = client.get(f"/?thread={SCRIPT_THREAD}")
    assert page.status_code == 200
    head = page.text.split('data-selected="')[1].split('"')[0]
    fragment = client.get(f"/frag/checkpoint?thread={SCRIPT_THREAD}&c={head}").text
    assert "<script>window" not in fragment
    assert "<img src=x" not in fragment
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in fragment
    # Thread ids are escaped too (a search echoes the query).
    listing = client.get("/", params={"q": '"><script>alert(1)</script>'}).text
    assert "<script>alert(1)" not in listing and "&lt;script&gt;alert(1)" in listing
    assert SCRIPT not in listing


def test_waiting_interrupts_are_marked(client: TestClient) -> None:
    page = client.get(f"/?thread={WAITING_THREAD}").text
    assert "⏸ waiting" in page
    head = page.split('data-selected="')[1].split('"')[0]
    fragment = client.get(f"/frag/checkpoint?thread={WAITING_THREAD}&c={head}").text
    assert "interrupts waiting" in fragment and "approve the refund?" in fragment


def _post(client: TestClient, path: str, body: dict[str, object]) -> dict[str, object]:
    response = client.post(path, json=body, headers={"origin": BASE})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_fork_copy_and_export_go_through_the_library(demo: tuple[Path, str]) -> None:
    path, thread = demo
    with source_on(path) as source:
        client = _client(source)
        tree = source.tree(thread, "")
        heads_before = set(tree.heads)
        old = sorted(tree.nodes)[4]
        # An action needs its confirmation.
        assert (
            client.post(
                "/api/fork", json={"thread": thread, "checkpoint": old}, headers={"origin": BASE}
            ).status_code
            == 400
        )
        made = _post(client, "/api/fork", {"confirm": True, "thread": thread, "checkpoint": old})
        assert made["thread"] == thread
        tree = source.tree(thread, "")
        assert set(tree.heads) == heads_before | {made["checkpoint"]}
        assert tree.nodes[str(made["checkpoint"])].metadata["forked_from"] == old
        # The fork's state is the old checkpoint's, message list rebuilt.
        fork_state = source.state(thread, "", str(made["checkpoint"]))
        old_state = source.state(thread, "", old)
        assert fork_state.channels["messages"].value == old_state.channels["messages"].value
        assert fork_state.channels["messages"].kind == "rebuilt"

        _post(
            client,
            "/api/copy-branch",
            {"confirm": True, "thread": thread, "checkpoint": old, "target": "branch-copy"},
        )
        assert source.tree("branch-copy", "").latest == old
        _post(client, "/api/copy-thread", {"confirm": True, "thread": thread, "target": "whole"})
        assert len(source.tree("whole", "").nodes) == len(tree.nodes)
        again = client.post(
            "/api/copy-thread",
            json={"confirm": True, "thread": thread, "target": "whole"},
            headers={"origin": BASE},
        )
        assert again.status_code == 400 and "already exists" in again.json()["error"]

        exported = client.get(f"/export?thread={thread}")
        assert exported.status_code == 200
        assert "attachment" in exported.headers["content-disposition"]
        lines = exported.text.splitlines()
        assert lines and all(json.loads(line) for line in lines)
    # The export imports into an empty database as the same thread.
    with Database.open(str(path.parent / "imported.db"), create=True) as target:
        target.ensure_schema()
        import_threads(target, io.StringIO(exported.text))
        assert target.run(existing_threads_plan(target.dialect, [thread])) == {thread}


def test_read_only_disables_the_actions(demo: tuple[Path, str]) -> None:
    path, thread = demo
    with source_on(path, read_only=True) as source:
        client = _client(source)
        page = client.get(f"/?thread={thread}").text
        assert "read-only" in page and "copy thread…" not in page
        head = page.split('data-selected="')[1].split('"')[0]
        fragment = client.get(f"/frag/checkpoint?thread={thread}&c={head}").text
        assert fragment.count('disabled title="the database is open read-only"') == 2
        for path_ in ("/api/fork", "/api/copy-branch", "/api/copy-thread"):
            response = client.post(
                path_,
                json={"confirm": True, "thread": thread, "checkpoint": head, "target": "t2"},
                headers={"origin": BASE},
            )
            assert response.status_code == 403 and "read-only" in response.json()["error"]
        with pytest.raises(ReadOnlyError):
            source.fork(thread, "", head)
        assert len(source.tree(thread, "").heads) == 2


def test_unknown_thread_and_checkpoint_are_clear_errors(client: TestClient) -> None:
    missing = client.get("/?thread=nope")
    assert missing.status_code == 404 and "unknown thread" in missing.text
    bad = client.get("/frag/checkpoint?thread=nope&c=x")
    assert bad.status_code == 404


def test_diff_shows_the_appended_messages(client: TestClient, demo: tuple[Path, str]) -> None:
    page = client.get(f"/?thread={demo[1]}").text
    head = page.split('data-selected="')[1].split('"')[0]
    fragment = client.get(f"/frag/checkpoint?thread={demo[1]}&c={head}").text
    # The head's diff against its parent: the last turn's review changed needs_approval.
    assert 'class="diff"' in fragment
    with source_on(demo[0]) as source:
        tree = source.tree(demo[1], "")
        first = sorted(tree.nodes)[0]
    diff = client.get(f"/frag/diff?thread={demo[1]}&a={first}&b={head}").text
    assert "appended" in diff and "Let&#39;s start over from here instead." in diff


def test_thread_list_pages_sorts_and_searches(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    builder = StateGraph(NoteState)
    builder.add_node("n", lambda s: {"note": s["note"] + "!"})
    builder.add_edge(START, "n")
    builder.add_edge("n", END)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        app = builder.compile(checkpointer=saver)
        for i in range(130):
            app.invoke({"note": "x" * i}, make_config(f"t-{i:04d}"))
        app.invoke({"note": "again"}, make_config("t-0007"))
    with source_on(path) as source:
        client = _client(source)
        first = client.get("/").text
        assert "130 thread(s)" in first and "page 1 of 3" in first
        # Newest first, in the reader's order (as `checkpointer threads` lists them).
        newest = source.threads(sort="updated", query="", offset=0, limit=50).threads
        assert first.index(f">{newest[0].thread_id}<") < first.index(f">{newest[-1].thread_id}<")
        third = client.get("/?page=3").text
        assert third.count('class="thread-link"') == 30
        by_count = client.get("/?sort=count").text
        # As `checkpointer threads --sort count`: most checkpoints first, ties by id.
        assert by_count.index(">t-0007<") < by_count.index(">t-0000<")
        assert ">t-0129<" not in by_count
        found = client.get("/?q=t-012").text
        assert "10 thread(s)" in found and found.count('class="thread-link"') == 10
        page = source.threads(sort="id", query="", offset=0, limit=5)
        assert [t.thread_id for t in page.threads] == [f"t-{i:04d}" for i in range(5)]


def test_subgraph_namespaces_are_reachable(tmp_path: Path) -> None:
    path = tmp_path / "ns.db"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        for ns, note in (("", "parent"), ("inner:1", "child <b>state</b>")):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"note": note}
            checkpoint["channel_versions"] = {"note": "1"}
            saver.put(
                {"configurable": {"thread_id": "nested", "checkpoint_ns": ns}},
                checkpoint,
                {"source": "loop", "step": 0, "parents": {}},
                {"note": "1"},
            )
    with source_on(path) as source:
        client = _client(source)
        page = client.get("/?thread=nested").text
        assert 'href="/?thread=nested&amp;ns=inner%3A1"' in page
        inner = client.get("/?thread=nested&ns=inner:1").text
        head = inner.split('data-selected="')[1].split('"')[0]
        fragment = client.get(f"/frag/checkpoint?thread=nested&ns=inner:1&c={head}").text
        assert "child &lt;b&gt;state&lt;/b&gt;" in fragment and "inner:1" in fragment


def test_the_token_redirect_stays_on_this_server(demo: tuple[Path, str]) -> None:
    with source_on(demo[0]) as source:
        anon = _client(source, authed=False)
        response = anon.get(f"//evil.example/?token={TOKEN}")
        assert response.status_code == 303
        assert response.headers["location"].startswith("/") and not response.headers[
            "location"
        ].startswith("//")


def test_a_selected_checkpoint_inside_a_collapsed_run_is_drawn(
    client: TestClient, demo: tuple[Path, str]
) -> None:
    with source_on(demo[0]) as source:
        tree = source.tree(demo[1], "")
    longest = max((r for r in _runs(tree.forest)), key=lambda r: len(r.ids))
    first, hidden, _ = longest.visible()
    assert hidden > 0
    middle = longest.ids[len(first) + hidden // 2]
    plain = client.get(f"/?thread={demo[1]}").text
    assert f'data-id="{middle}"' not in plain
    focused = client.get(f"/?thread={demo[1]}&c={middle}").text
    assert f'data-id="{middle}"' in focused and focused.count('class="more"') >= 2
    # A gap loads in pages and offers the rest.
    gap = client.get(
        f"/frag/run?thread={demo[1]}&first={longest.first}&start={len(first)}&count={hidden}"
    ).text
    assert gap.count('<li class="node') == min(hidden, 200)


def _runs(forest: list[Run]) -> list[Run]:
    out, stack = [], list(forest)
    while stack:
        run = stack.pop()
        out.append(run)
        stack.extend(run.children)
    return out
