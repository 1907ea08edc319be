"""One Rasa server for every action server of section 5: a router between them, by conversation.

Rasa sends every action call to one action endpoint. So that one Rasa server (about 1 GB) can serve
the action servers of every end and variant, its endpoint is this router, which passes each call
on to the action server the conversation belongs to: conversations are named
`bench-<route>-...`, and BENCH_ROUTES maps each route to an action server's base URL. The router
adds the same hop to every line of the section.

Run: `BENCH_ROUTES='{"r0": "http://127.0.0.1:5055"}' python tests/bench/router.py PORT`; ready
when `GET /health` answers.
"""

from __future__ import annotations

import json
import os
import re
import sys

from aiohttp import ClientSession, TCPConnector, web

SENDER = re.compile(rb'"sender_id"\s*:\s*"bench-([A-Za-z0-9]+)-')
PASSED_HEADERS = ("Content-Type", "Authorization")


def app(routes: dict[str, str]) -> web.Application:
    application = web.Application(client_max_size=64 * 1024**2)

    async def start(application: web.Application) -> None:
        application["http"] = ClientSession(connector=TCPConnector(limit=0))

    async def stop(application: web.Application) -> None:
        await application["http"].close()

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        # The tracker's sender comes first in Rasa's request; no need to parse the whole body.
        match = SENDER.search(body, 0, 4096) or SENDER.search(body)
        target = routes.get(match.group(1).decode()) if match else None
        if target is None:
            return web.Response(status=404, text="no route for this conversation")
        headers = {name: request.headers[name] for name in PASSED_HEADERS if name in request.headers}
        url = target + request.rel_url.path_qs
        async with request.app["http"].request(request.method, url, data=body, headers=headers) as answer:
            content = await answer.read()
            return web.Response(status=answer.status, body=content, content_type=answer.content_type or None)

    application.on_startup.append(start)
    application.on_cleanup.append(stop)
    application.router.add_get("/health", health)
    application.router.add_route("*", "/{tail:.*}", forward)
    return application


def main() -> int:
    port = int(sys.argv[1])
    routes = json.loads(os.environ["BENCH_ROUTES"])
    try:
        import uvloop

        loop = uvloop.new_event_loop()  # as the action servers run
    except ImportError:
        loop = None
    web.run_app(app(routes), host="127.0.0.1", port=port, access_log=None, print=None, loop=loop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
