"""The floor of a remote tool call, for section 1: one process, served the way the CRM MCP server is
(uvicorn, httptools, uvloop), with a tool that does nothing, reached two ways.

* `/mcp`: the mcp SDK's own server (`MCPServer`, streamable HTTP, JSON responses, sessions), one
  tool `noop` with an output schema, as the CRM's tools have.
* `/plain`: the same function behind a plain JSON POST, no MCP.

`/mcp` minus `/plain` is what the SDK's client and server cost per call on this machine, whoever
uses them; `/mcp` alone is the least any MCP call can add to a local one (a tool that does nothing).
Run: `python tests/bench/floor_server.py PORT`; ready when `GET /health` answers.
"""

from __future__ import annotations

import json
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

MCP_PATH = "/mcp"
PLAIN_PATH = "/plain"


class NoopResult(BaseModel):
    ok: bool
    echo: str | None = None


def noop(email: str) -> NoopResult:
    """Do nothing; answer ok."""
    return NoopResult(ok=True, echo=email)


def create_app() -> ASGIApp:
    server = MCPServer("floor")
    server.add_tool(noop)
    mcp_app = server.streamable_http_app(streamable_http_path=MCP_PATH, json_response=True)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in (PLAIN_PATH, "/health"):
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            answer = {"ok": True}
            if scope["path"] == PLAIN_PATH:
                answer = noop(json.loads(body)["email"]).model_dump()
            payload = json.dumps(answer).encode()
            length = str(len(payload)).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", length)]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
            return
        await mcp_app(scope, receive, send)

    return app


if __name__ == "__main__":
    uvicorn.run(
        create_app(),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        loop="uvloop",
        http="httptools",
        ws="none",
        log_level="warning",
        lifespan="on",
    )
