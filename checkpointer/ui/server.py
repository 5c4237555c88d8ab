"""Running the viewer: bind a socket, build the guarded app for the port it got, serve it
with uvicorn (in this thread for the CLI, in a background thread for tests)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from checkpointer.ui.app import create_app
from checkpointer.ui.data import Source
from checkpointer.ui.security import allowed_hosts, new_token

DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Bound:
    """A listening socket and the page's URL, token included."""

    sock: socket.socket
    host: str
    port: int
    token: str

    @property
    def base(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        if self.host in ("0.0.0.0", "::"):
            shown = "127.0.0.1"
        return f"http://{shown}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/?token={self.token}"


def bind(host: str = DEFAULT_HOST, port: int = 0) -> Bound:
    """Listen on (host, port); port 0 picks a free one. The token is new every time."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(128)
    return Bound(sock, host, sock.getsockname()[1], new_token())


def make_server(source: Source, bound: Bound) -> uvicorn.Server:
    app = create_app(
        source, token=bound.token, hosts=allowed_hosts(bound.host, bound.port), port=bound.port
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    return uvicorn.Server(config)


def serve(source: Source, bound: Bound) -> None:
    """Serve until interrupted (Ctrl-C)."""
    make_server(source, bound).run(sockets=[bound.sock])


@contextmanager
def serving_in_thread(source: Source, host: str = DEFAULT_HOST, port: int = 0) -> Iterator[Bound]:
    """The viewer running in a background thread while the block runs (tests, notebooks)."""
    bound = bind(host, port)
    server = make_server(source, bound)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [bound.sock]}, name="checkpointer-ui", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        raise RuntimeError("the viewer did not start")
    try:
        yield bound
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        bound.sock.close()
