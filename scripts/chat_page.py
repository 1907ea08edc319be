"""Serve the chat page (web/) on 127.0.0.1: a few static files and the address of Rasa's socket.io.

    python scripts/chat_page.py --rasa-url http://127.0.0.1:5005 [--host 127.0.0.1] [--port 8080]
                                [--no-answer-seconds 20]

The page talks to Rasa's `socketio` channel over a WebSocket only (no HTTP long-polling), so the
browser never makes a cross-origin HTTP request to Rasa and Rasa needs no `--cors` opening: its HTTP
API stays closed to other web pages. Every file goes out with a Content-Security-Policy that allows
scripts from this server only and connections to this Rasa only, so even if a bot message were ever
rendered as HTML, a `<script>` in a note could not run.

Routes: `/` (the page), `/chat.js`, `/chat.css`, `/vendor/socket.io.min.js` (socket.io-client from
web/node_modules, installed by `make setup`), `/config.json` (where the socket is, and after how
many seconds without an answer the page says so), `/health`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

WEB = Path(__file__).resolve().parents[1] / "web"
SOCKET_IO_CLIENT = WEB / "node_modules" / "socket.io-client" / "dist" / "socket.io.min.js"
SOCKET_PATH = "/socket.io/"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

FILES = {
    "/": (WEB / "index.html", "text/html"),
    "/chat.js": (WEB / "chat.js", "text/javascript"),
    "/chat.css": (WEB / "chat.css", "text/css"),
    "/vendor/socket.io.min.js": (SOCKET_IO_CLIENT, "text/javascript"),
}


def security_headers(rasa_url: str) -> dict[str, str]:
    parts = urlsplit(rasa_url)
    socket_origin = f"{'wss' if parts.scheme == 'https' else 'ws'}://{parts.netloc}"
    policy = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src 'self' {socket_origin}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def make_app(rasa_url: str, no_answer_seconds: float = 20.0) -> web.Application:
    missing = [str(path) for path, _ in FILES.values() if not path.is_file()]
    if missing:
        raise SystemExit(f"chat page: missing {', '.join(missing)} (run `make setup`)")
    headers = security_headers(rasa_url)
    config = json.dumps(
        {"socketUrl": rasa_url.rstrip("/"), "socketPath": SOCKET_PATH, "noAnswerSeconds": no_answer_seconds}
    )

    def static(path: Path, content_type: str) -> Handler:
        body = path.read_bytes()  # a few small files, read once: restart the server after editing them

        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(body=body, content_type=content_type, headers=headers)

        return handler

    async def config_json(request: web.Request) -> web.StreamResponse:
        return web.Response(text=config, content_type="application/json", headers=headers)

    async def health(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok", headers=headers)

    async def favicon(request: web.Request) -> web.StreamResponse:
        return web.Response(status=204, headers=headers)

    app = web.Application()
    for route, (path, content_type) in FILES.items():
        app.router.add_get(route, static(path, content_type))
    app.router.add_get("/config.json", config_json)
    app.router.add_get("/health", health)
    app.router.add_get("/favicon.ico", favicon)
    return app


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rasa-url", required=True, help="Rasa's base URL as the browser reaches it")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--no-answer-seconds", type=float, default=20.0, help="say so when the assistant is silent this long"
    )
    args = parser.parse_args()
    app = make_app(args.rasa_url, args.no_answer_seconds)
    print(f"chat page on http://{args.host}:{args.port}/ (Rasa at {args.rasa_url})", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
