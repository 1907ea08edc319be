"""`python -m actions.server`: the action server as deployed, configured from the environment.

ACTION_SERVER_HOST (127.0.0.1), ACTION_SERVER_PORT (5055), ACTION_SERVER_TOKEN (unset: no check),
plus what actions.setup reads. The skills, endpoints and domain are checked before the server
listens, so a bad file stops it at start-up.

rasa_sdk checks no credentials at all; with ACTION_SERVER_TOKEN set, /webhook, /actions and /metrics
(Prometheus, see mcp_bridge.metrics) answer 401 unless the request carries the token the way Rasa's
`action_endpoint: {token: ...}` sends it (`?token=...`), or as `Authorization: Bearer ...`.
"""

import asyncio
import hmac
import logging
import os
import sys

from rasa_sdk.endpoint import create_app
from sanic import Sanic, response
from sanic.request import Request
from sanic.response import HTTPResponse

from actions.setup import executor
from mcp_bridge import metrics
from mcp_bridge.errors import ConfigError

log = logging.getLogger("actions.server")


def build_app(token: str | None = None) -> Sanic:
    app = create_app("actions", cors_origins=None)

    if token:

        @app.middleware("request")
        async def require_token(request: Request) -> HTTPResponse | None:
            if request.path == "/health":
                return None
            supplied = request.args.get("token") or _bearer(request.headers.get("authorization", ""))
            if supplied and hmac.compare_digest(supplied.encode(), token.encode()):
                return None
            return response.json({"error": "missing or wrong action server token"}, status=401)

    metrics.attach(app)  # /metrics, behind the token check above

    @app.listener("after_server_stop")
    async def close_mcp_sessions(app: Sanic, loop: asyncio.AbstractEventLoop) -> None:
        await executor().aclose()

    return app


def _bearer(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("sanic.access", "httpx2", "httpcore2", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    host = os.environ.get("ACTION_SERVER_HOST", "127.0.0.1")
    port = int(os.environ.get("ACTION_SERVER_PORT", "5055"))
    try:
        executor()
    except ConfigError as exc:
        print(f"action server not started: {exc}", file=sys.stderr)
        return 2
    token = os.environ.get("ACTION_SERVER_TOKEN") or None
    log.info(
        "action server listening on http://%s:%d/webhook (%s)",
        host,
        port,
        "token required" if token else "no token configured",
    )
    build_app(token).run(host=host, port=port, workers=1, access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
