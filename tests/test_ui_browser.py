"""The viewer in a real browser: Debian's chromium driven by Playwright (never a browser
downloaded at run time). Screenshots land in test-artifacts/ui/.

Under CI=true these tests fail, never skip, when chromium or Playwright is missing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from checkpointer.ui.data import ReaderSource
from checkpointer.ui.server import Bound, serving_in_thread
from tests.ui_support import (
    ARTIFACTS,
    CHROMIUM_ARGS,
    SCRIPT_THREAD,
    WAITING_THREAD,
    add_script_thread,
    add_waiting_thread,
    build_demo,
    copy_db,
    require_chromium,
    source_on,
)

VIEWPORT = {"width": 1440, "height": 900}


@pytest.fixture(scope="module")
def demo_master(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("ui-browser") / "demo.db"
    thread = build_demo(path)
    add_script_thread(path)
    add_waiting_thread(path)
    return path, thread


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def served(
    demo_master: tuple[Path, str], tmp_path: Path
) -> Iterator[tuple[Bound, ReaderSource, str]]:
    """The viewer on a private copy of the demo database, on a free loopback port."""
    path = copy_db(demo_master[0], tmp_path / "demo.db")
    with source_on(path) as source, serving_in_thread(source) as bound:
        yield bound, source, demo_master[1]


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    # CSP bypassed: escaping alone must keep a stored <script> inert (the CSP header is
    # a second wall, checked in test_ui_server), and tests may evaluate their own script.
    context = browser.new_context(viewport=VIEWPORT, bypass_csp=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield pg
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        try:
            pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
        finally:
            context.close()
    assert not errors, errors


def _open_thread(page: Any, bound: Bound, thread: str) -> None:
    page.goto(bound.url)
    page.get_by_role("link", name=thread, exact=True).click()
    page.wait_for_selector("#panel .checkpoint")


def _messages_shown(page: Any) -> int:
    return int(page.locator('#panel tr.channel[data-channel="messages"] .v-msg').count())


def test_the_tree_shows_the_fork(page: Any, served: tuple[Bound, ReaderSource, str]) -> None:
    bound, source, thread = served
    _open_thread(page, bound, thread)
    tree = page.locator("#tree")
    assert tree.locator(".branch-label").count() == 1
    assert "branch from step" in tree.locator(".branch-label").inner_text()
    assert tree.locator(".run.depth-1 .src-fork").count() == 1
    assert tree.locator(".badge.head").count() == 2
    assert tree.locator(".badge.head", has_text="latest head").count() == 1
    # The long main line is collapsed; its middle loads on click.
    hidden = next(
        c
        for c in source.tree(thread, "").nodes
        if tree.locator(f'li.node[data-id="{c}"]').count() == 0
    )
    tree.locator("button.more").first.click()
    page.wait_for_selector(f'#tree li.node[data-id="{hidden}"]')
    assert tree.locator("li.node").count() == len(source.tree(thread, "").nodes)


def test_clicking_a_checkpoint_shows_its_rebuilt_state(
    page: Any, served: tuple[Bound, ReaderSource, str]
) -> None:
    bound, source, thread = served
    _open_thread(page, bound, thread)
    tree = source.tree(thread, "")
    main_head = next(h for h in tree.heads if h != tree.latest)
    # The newest drawn checkpoint of the main line whose message list is replayed (not a
    # stored snapshot).
    drawn = page.locator("#tree ol.run.depth-0 li.node").evaluate_all(
        "els => els.map(e => e.dataset.id)"
    )
    main_head = max(
        (c for c in drawn if source.state(thread, "", c).channels["messages"].kind == "rebuilt"),
        key=lambda c: len(source.state(thread, "", c).channels["messages"].value),
    )
    page.locator(f'#tree li.node[data-id="{main_head}"]').click()
    page.wait_for_selector(f'#panel .checkpoint[data-id="{main_head}"]')
    row = page.locator('#panel tr.channel[data-channel="messages"]')
    assert row.locator(".kind").inner_text() == "rebuilt delta"
    expected = source.state(thread, "", main_head).channels["messages"].value
    assert len(expected) > 20
    assert _messages_shown(page) == len(expected)
    assert expected[-1]["content"] in row.inner_text()
    assert f"c={main_head}" in page.url


def test_the_diff_shows_the_appended_messages(
    page: Any, served: tuple[Bound, ReaderSource, str]
) -> None:
    bound, source, thread = served
    _open_thread(page, bound, thread)
    tree = source.tree(thread, "")
    ids = sorted(tree.nodes)
    # Against the parent: the input checkpoint of turn 2 appended the user's message.
    second_input = [c for c in ids if tree.nodes[c].metadata.get("source") == "input"][1]
    page.locator(f'#tree li.node[data-id="{second_input}"]').click()
    page.wait_for_selector(f'#panel .checkpoint[data-id="{second_input}"]')
    change = page.locator('#diff .change[data-channel="messages"]')
    assert "+1 appended" in change.inner_text()
    assert "Question 2:" in change.locator(".part-appended").inner_text()
    # Against a checkpoint picked in the tree (⇄): everything since the first one.
    latest = tree.latest
    assert latest is not None
    page.locator(f'#tree li.node[data-id="{latest}"]').click()
    page.wait_for_selector(f'#panel .checkpoint[data-id="{latest}"]')
    page.locator(f'#tree li.node[data-id="{ids[0]}"] button.cmp').click()
    page.wait_for_selector(f'#diff:has-text("…{ids[0][-8:]}")')
    a = source.state(thread, "", ids[0]).channels["messages"].value
    b = source.state(thread, "", latest).channels["messages"].value
    appended = page.locator('#diff .change[data-channel="messages"] .part-appended .v-msg')
    assert appended.count() == len(b) - len(a)
    assert b[-1]["content"] in appended.last.inner_text()


def test_a_fork_made_from_the_page_shows_up_as_a_new_branch(
    page: Any, served: tuple[Bound, ReaderSource, str]
) -> None:
    bound, source, thread = served
    _open_thread(page, bound, thread)
    tree = source.tree(thread, "")
    heads_before = set(tree.heads)
    labels_before = page.locator("#tree .branch-label").count()
    target = sorted(tree.nodes)[4]
    page.locator(f'#tree li.node[data-id="{target}"]').click()
    page.wait_for_selector(f'#panel .checkpoint[data-id="{target}"]')
    page.get_by_role("button", name="fork from here…").click()
    dialog = page.locator("dialog#confirm")
    assert "Fork thread" in dialog.inner_text()
    page.screenshot(path=str(_artifact("fork_confirmation.png")))
    with page.expect_navigation():
        dialog.get_by_role("button", name="confirm").click()
    page.wait_for_selector("#panel .checkpoint")
    heads_after = set(source.tree(thread, "").heads)
    (new_head,) = heads_after - heads_before
    assert page.locator("#tree .badge.head").count() == len(heads_after)
    assert page.locator("#tree .branch-label").count() == labels_before + 1
    node = page.locator(f'#tree li.node[data-id="{new_head}"]')
    assert "fork" in node.locator(".src").inner_text()
    assert node.evaluate("el => el.closest('ol.run').className").count("depth-1") == 1
    assert page.locator(f'#panel .checkpoint[data-id="{new_head}"]').count() == 1


def test_script_in_state_renders_as_text(
    page: Any, served: tuple[Bound, ReaderSource, str]
) -> None:
    bound, _, _ = served
    _open_thread(page, bound, SCRIPT_THREAD)
    note = page.locator('#panel tr.channel[data-channel="note"]')
    assert "<script>window.__pwned = 1</script>" in note.inner_text()
    assert page.locator("#panel script, #panel img").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_waiting_interrupts_are_marked(page: Any, served: tuple[Bound, ReaderSource, str]) -> None:
    bound, _, _ = served
    _open_thread(page, bound, WAITING_THREAD)
    assert page.locator("#tree .badge.waiting").count() == 1
    assert "approve the refund?" in page.locator("#panel .interrupts").inner_text()


def test_no_token_no_page_and_no_cross_origin_post(
    browser: Any, served: tuple[Bound, ReaderSource, str]
) -> None:
    bound, source, thread = served
    context = browser.new_context(viewport=VIEWPORT)
    try:
        pg = context.new_page()
        refused = pg.goto(bound.base + "/")
        assert refused is not None and refused.status == 403
        assert "token" in pg.inner_text("body")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / "no_token.png"))
        # A page elsewhere that knows the URL (token included) still cannot make a write.
        statuses: list[int] = []
        pg.on(
            "response",
            lambda r: statuses.append(r.status) if "/api/fork" in r.url else None,
        )
        with _other_origin() as elsewhere:
            pg.goto(elsewhere)
            heads = set(source.tree(thread, "").heads)
            target = sorted(source.tree(thread, "").nodes)[2]
            outcome = pg.evaluate(
                """async ([url, thread, target]) => {
                    try {
                        const r = await fetch(url, {method: "POST", mode: "no-cors",
                            credentials: "include", headers: {"content-type": "text/plain"},
                            body: JSON.stringify({confirm: true, thread: thread,
                                                  checkpoint: target})});
                        return "sent " + r.type;
                    } catch (e) { return "blocked " + e; }
                }""",
                [f"{bound.base}/api/fork?token={bound.token}", thread, target],
            )
            assert outcome == "sent opaque", outcome
            for _ in range(100):  # the response event may trail the fetch's promise
                if statuses:
                    break
                pg.wait_for_timeout(50)
            assert statuses == [403]
            assert set(source.tree(thread, "").heads) == heads
    finally:
        context.close()


@contextmanager
def _other_origin() -> Iterator[str]:
    """A page on another loopback port: another origin, as a web page would be."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><p>another site</p>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _artifact(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


def _browse_langgraph(
    browser: Any, url: str, schema: str | None, found: tuple[str, str, Any], shot: str
) -> None:
    """Tree, rebuilt state, diff and disabled actions on a LangGraph database's `fork`
    thread (`found`: a checkpoint with a replayed message list, its parent, its messages)."""
    from checkpointer.cli.graphs import load_graph
    from checkpointer.ui.data import open_source
    from tests.test_cli_langgraph_db import SCHEMAS

    cid, parent, messages = found
    specs = dict(load_graph(SCHEMAS["fork"]).channels)
    context = browser.new_context(viewport=VIEWPORT)
    try:
        with (
            open_source(url, schema=schema, specs=specs) as source,
            serving_in_thread(source) as bound,
        ):
            pg = context.new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            _open_thread(pg, bound, "fork")
            assert pg.locator("header .badge.ro").inner_text() == "read-only"
            assert "LangGraph" in pg.locator("header .where").inner_text()
            tree = pg.locator("#tree")
            assert tree.locator(".branch-label").count() == 1
            assert tree.locator(".badge.head").count() == 2
            assert pg.get_by_role("button", name="copy thread…").count() == 0
            if tree.locator(f'li.node[data-id="{cid}"]').count() == 0:  # in a collapsed run
                pg.goto(f"{bound.base}/?thread=fork&c={cid}")
            pg.locator(f'#tree li.node[data-id="{cid}"]').click()
            pg.wait_for_selector(f'#panel .checkpoint[data-id="{cid}"]')
            row = pg.locator('#panel tr.channel[data-channel="messages"]')
            assert row.locator(".kind").inner_text() == "rebuilt delta"
            assert _messages_shown(pg) == len(messages)
            assert messages[-1].content in row.inner_text()
            change = pg.locator('#diff .change[data-channel="messages"]')
            assert "appended" in change.inner_text()
            appended = change.locator(".part-appended .v-msg")  # a message, not its repr
            assert appended.count() >= 1 and messages[-1].content in appended.last.inner_text()
            for name in ("fork from here…", "copy to a new thread…"):
                assert pg.get_by_role("button", name=name).is_disabled()
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(ARTIFACTS / shot), full_page=True)
            assert not errors, errors
            assert parent in source.tree("fork", "").nodes
    finally:
        context.close()


def test_a_langgraph_sqlite_database_in_the_browser(browser: Any, tmp_path: Path) -> None:
    """A database of LangGraph's own SqliteSaver (delta channel, fork, interrupt): shown as
    ours are, actions disabled, the file's bytes unchanged."""
    pytest.importorskip("langgraph.checkpoint.sqlite")
    from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver

    from tests.test_cli_langgraph_db import _write
    from tests.test_ui_langgraph import rebuilt_checkpoint

    path = tmp_path / "langgraph.db"
    with LangGraphSqliteSaver.from_conn_string(str(path)) as saver:
        found = rebuilt_checkpoint(_write(saver)["fork"])
    before = path.read_bytes()
    _browse_langgraph(browser, str(path), None, found, "langgraph_sqlite.png")
    assert path.read_bytes() == before
    # A read-only reader of a WAL database may leave SQLite's shared-memory index and an
    # empty log beside it (it may not delete them); it never writes a page.
    wal = tmp_path / "langgraph.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def test_a_langgraph_postgres_database_in_the_browser(browser: Any) -> None:
    """The same on a fresh schema written by LangGraph's own PostgresSaver; its tables and
    rows unchanged."""
    pytest.importorskip("langgraph.checkpoint.postgres")
    import uuid

    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver as LangGraphPostgresSaver

    from tests.conftest import PG_URL, require_postgres
    from tests.test_cli_langgraph_db import _pg_fingerprint, _write
    from tests.test_ui_langgraph import rebuilt_checkpoint

    require_postgres()
    schema = f"cp_lgui_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        with LangGraphPostgresSaver.from_conn_string(
            f"{PG_URL}?options=-csearch_path%3D{schema}"
        ) as saver:
            saver.setup()
            found = rebuilt_checkpoint(_write(saver)["fork"])
        before = _pg_fingerprint(schema)
        _browse_langgraph(browser, PG_URL, schema, found, "langgraph_postgres.png")
        assert _pg_fingerprint(schema) == before
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
