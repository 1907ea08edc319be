"""`python -m actions.server`: the action server as deployed, configured from the environment.

ACTION_SERVER_HOST (127.0.0.1), ACTION_SERVER_PORT (5055), plus what actions.setup reads. The skills,
endpoints and domain are checked before the server listens, so a bad file stops it at start-up.
"""

import asyncio
import logging
import os
import sys

from rasa_sdk.endpoint import create_app
from sanic import Sanic

from actions.setup import executor
from mcp_bridge.errors import ConfigError

log = logging.getLogger("actions.server")


def build_app() -> Sanic:
    app = create_app("actions", cors_origins=None)

    @app.listener("after_server_stop")
    async def close_mcp_sessions(app: Sanic, loop: asyncio.AbstractEventLoop) -> None:
        await executor().aclose()

    return app


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
    log.info("action server listening on http://%s:%d/webhook", host, port)
    build_app().run(host=host, port=port, workers=1, access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
