"""Who may drive the viewer: only the person who ran `checkpointer ui`.

- The server binds 127.0.0.1 unless told otherwise.
- Every request carries the random token printed in the URL: as `?token=` once (the answer
  sets a cookie and redirects to the same page without it) or as that cookie after. Tokens
  are compared in constant time. Another local user cannot guess it; a web page cannot read
  it.
- The Host header must name this server (a DNS-rebinding page cannot pose as it).
- A request that changes anything (any method but GET and HEAD) must come from this
  server's own pages: its Origin (or, lacking one, Referer) must be this server's origin.
  The cookie is SameSite=Strict besides.
- Every answer forbids framing, sniffing and scripts from anywhere but the server itself.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD"})
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # Not no-referrer: with it a browser sends `Origin: null` on same-origin POSTs.
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


def new_token() -> str:
    return secrets.token_urlsafe(24)


LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
ANY_ADDRESS = ("0.0.0.0", "::", "")


def allowed_hosts(host: str, port: int) -> set[str] | None:
    """Host header values that name this server; None (any) when bound to every address,
    where the machine's own names are not known (the token still guards every request)."""
    if host in ANY_ADDRESS:
        return None
    names = {host}
    if host in LOOPBACK:
        names |= {"127.0.0.1", "localhost", "[::1]"}
    names = {f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names}
    return {f"{n}:{port}" for n in names}


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


class TokenGuard:
    """ASGI middleware enforcing the rules in this module's docstring."""

    def __init__(
        self, app: ASGIApp, *, token: str, hosts: Iterable[str] | None, cookie_name: str
    ) -> None:
        self.app = app
        self.token = token
        self.hosts = None if hosts is None else {h.lower() for h in hosts}
        self.cookie_name = cookie_name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = (headers.get("host") or "").lower()
        if self.hosts is not None and host not in self.hosts:
            await self._refuse(scope, receive, send, f"unknown host {host!r}")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie") or "")
        except Exception:  # a malformed cookie header is no token
            cookies = SimpleCookie()
        morsel = cookies.get(self.cookie_name)
        from_cookie = _same(morsel.value if morsel else None, self.token)
        from_query = _same(query.get("token"), self.token)
        if not (from_cookie or from_query):
            await self._refuse(
                scope,
                receive,
                send,
                "missing or wrong token: open the URL that `checkpointer ui` printed",
            )
            return
        method = scope["method"].upper()
        if method not in SAFE_METHODS and not self._same_origin(headers, host):
            await self._refuse(scope, receive, send, "cross-origin request refused")
            return
        if from_query and method in SAFE_METHODS:
            # Trade the token in the address bar for a cookie, and drop it from the URL.
            rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
            # One leading slash: `//host/...` would send the browser to another site.
            location = "/" + scope["path"].lstrip("/\\") + (f"?{rest}" if rest else "")
            response: Response = RedirectResponse(location, status_code=303)
            response.set_cookie(
                self.cookie_name, self.token, httponly=True, samesite="strict", path="/"
            )
            await self._secured(response)(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_secured)

    def _same_origin(self, headers: Headers, host: str) -> bool:
        origin = headers.get("origin")
        if origin is None or origin == "null":
            referer = headers.get("referer")
            if not referer:
                return False
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        parts = urlsplit(origin)
        return parts.scheme == "http" and parts.netloc.lower() == host

    @staticmethod
    def _secured(response: Response) -> Response:
        for name, value in HEADERS:
            response.headers[name.decode()] = value.decode()
        return response

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, why: str) -> None:
        response = self._secured(PlainTextResponse(f"forbidden: {why}\n", status_code=403))
        await response(scope, receive, send)
