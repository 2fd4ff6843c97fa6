"""The dashboard's defences against other pages in the same browser (docs/dashboard.md).

:class:`SecurityMiddleware` wraps the whole application:

- every response carries ``X-Frame-Options: DENY`` and a ``Content-Security-Policy`` with
  ``frame-ancestors 'none'`` and ``default-src 'self'`` (no page can frame the dashboard, so
  no click on it can be hijacked; the page loads and connects to nothing but this origin),
  plus ``nosniff``, ``no-referrer`` and ``Cross-Origin-Resource-Policy: same-origin``;
- a request another site's page made (the browser's ``Sec-Fetch-Site`` is ``cross-site`` or
  ``same-site``: another port of 127.0.0.1 is the same site) is refused with 403 before any
  route runs, unless it is a top-level navigation (a link followed), which gets the page
  but starts nothing: ``request.state.may_start_work`` is False, so a testnet view does not
  start its chain-reading thread and evaluation workers until the page's own same-origin
  event stream asks. A cross-site ``<img>``, ``<script>``, ``fetch`` or form post therefore
  never reaches a route;
- at most ``max_streams`` live event streams at once (503 beyond: each holds a task and
  polls the disk).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "img-src 'self' data:",
        "style-src 'self'",
        "script-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
#: Live event streams served at once (each page open in a tab holds one).
MAX_STREAMS = 32
#: ``Sec-Fetch-Site`` values of requests this origin's own pages (or the user) made.
OWN_SITES = frozenset({"same-origin", "none"})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def foreign_request(scope: Scope) -> bool:
    """Did another site's page make this request (per the browser's Fetch Metadata)?
    Clients that send no ``Sec-Fetch-Site`` (curl, scripts) are not browsers' pages."""
    site = _header(scope, b"sec-fetch-site")
    return site is not None and site not in OWN_SITES


def top_level_navigation(scope: Scope) -> bool:
    return (
        scope.get("method") in ("GET", "HEAD")
        and _header(scope, b"sec-fetch-mode") == "navigate"
        and _header(scope, b"sec-fetch-dest") == "document"
    )


class SecurityMiddleware:
    """Headers on every response, cross-site requests refused, live streams bounded."""

    def __init__(self, app: ASGIApp, max_streams: int = MAX_STREAMS) -> None:
        self.app = app
        self.max_streams = max_streams
        self.streams = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers") or []
                    if k.lower() not in {name for name, _ in SECURITY_HEADERS}
                ]
                message["headers"] = headers + SECURITY_HEADERS
            await send(message)

        foreign = foreign_request(scope)
        if foreign and not top_level_navigation(scope):
            await _plain(send_with_headers, 403, "cross-site request refused")
            return
        scope.setdefault("state", {})["may_start_work"] = not foreign
        if not str(scope.get("path", "")).startswith("/sse/"):
            await self.app(scope, receive, send_with_headers)
            return
        if self.streams >= self.max_streams:
            await _plain(
                send_with_headers,
                503,
                f"{self.streams} live connections already (the limit is {self.max_streams})",
            )
            return
        self.streams += 1
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            self.streams -= 1


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
