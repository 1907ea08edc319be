"""The plugin's MCP client as the conformance suite runs it: ``python -m tests.live.conformance.client URL``.

The suite starts a test server for one scenario, runs this command with the server's URL as its last
argument, the scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and what the scenario hands the client (a
client id and secret) in ``MCP_CONFORMANCE_CONTEXT``, and then checks what it saw on the wire. Nothing here
speaks MCP or OAuth itself: it configures the plugin's runtime (``MCPRuntime``) as an ``endpoints.yml``
would, lists the server's tools and calls each once, as the action server does, and plays the person
where a scenario needs one:

* a server's question (elicitation) goes through the plugin's own state machine
  (:mod:`mcp_bridge.server_questions.elicitation`), the person answering "skip" to every field, and the
  answers go back to the call that is waiting;
* acting as the person (``grant: authorization_code``), the sign-in link the runtime raises is opened
  as the action server's route would (:meth:`PersonOAuth.start`), the authorization server's redirect
  is followed as a browser would, and the callback and "Use this account" go to
  :meth:`PersonOAuth.complete` and :meth:`PersonOAuth.confirm`.

Exit status 0 when every tool call returned, 1 otherwise (the suite judges the rest).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlparse

from mcp_bridge.auth.person import Acting, PersonOAuth, SignInRequiredError
from mcp_bridge.auth.token_store import Keys, TokenStore
from mcp_bridge.config.servers import parse_mcp_servers
from mcp_bridge.errors import InputRequiredError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.mcp_sdk import http
from mcp_bridge.server_questions import elicitation

SERVER = "conformance"
# Scenarios whose client acts as the person (authorization code with PKCE: every auth/ scenario but
# the client-credentials extension's), and the pre-registered client it is then (the suite's own id
# and secret when its context has them).
CLIENT_CREDENTIALS = "auth/client-credentials-"
REDIRECT_URI = "http://127.0.0.1:1/mcp-bridge/oauth/callback"
PERSON_CLIENT = "conformance-bridge"
WHO = Acting("conformance-conversation", "conformance:person", None)
# What a tool of a scenario is called with when its input schema asks for something.
ARGUMENTS: dict[str, Any] = {"a": 2, "b": 3}


def _entry(url: str, scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": SERVER, "url": url, "type": "http"}
    if scenario.startswith("auth/") and not scenario.startswith(CLIENT_CREDENTIALS):
        entry["oauth"] = {
            "grant": "authorization_code",
            "client_id": context.get("client_id", PERSON_CLIENT),
            "redirect_uri": REDIRECT_URI,
            **({"client_secret": context["client_secret"]} if "client_secret" in context else {}),
        }
    elif "client_id" in context:
        # Client credentials with no token_url: the token endpoint is discovered.
        entry["oauth"] = {"client_id": context["client_id"], "client_secret": context["client_secret"]}
    return entry


async def _sign_in(person: PersonOAuth, needed: SignInRequiredError) -> None:
    """What the person does with the sign-in link: open it, type the code the chat showed, be
    redirected back, use the account."""
    assert needed.link is not None, needed
    ticket = parse_qs(urlparse(needed.link.url).query)["start"][0]
    browser = secrets.token_urlsafe(32)
    url = (await person.start(ticket, browser, needed.link.code)).url  # the code the chat showed
    async with http.AsyncClient(follow_redirects=False, timeout=10) as client:
        for _ in range(5):
            if url.startswith(REDIRECT_URI):
                break
            answer = await client.get(url)
            assert answer.is_redirect, f"the authorization server answered {answer.status_code}"
            url = urljoin(url, answer.headers["location"])
    query = {key: values[0] for key, values in parse_qs(urlparse(url).query).items()}
    linked = await person.complete(
        query["state"], query.get("code"), query.get("iss"), query.get("error"), browser=browser
    )
    await person.confirm(linked.ticket, browser, use=True)


def _answers(requests: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The person's answers to a server's questions, through the plugin's state machine: "skip"
    to every field (an optional one is left out, or takes its default), "yes" to a URL."""
    answers: dict[str, dict[str, Any]] = {}
    for key, request in requests.items():
        step = elicitation.begin(SERVER, request)
        for _ in range(elicitation.MAX_FIELDS + 1):
            if isinstance(step, elicitation.Replied):
                break
            step = elicitation.reply(step.pending, "yes" if step.pending.mode == "url" else "skip")
        assert isinstance(step, elicitation.Replied), step
        answers[key] = {"action": step.action, **({"content": step.content} if step.content else {})}
    return answers


async def _call(
    runtime: MCPRuntime, tool: str, arguments: dict[str, Any], person: PersonOAuth | None
) -> None:
    handle: str | None = None
    state: str | None = None
    responses: dict[str, dict[str, Any]] | None = None
    for _ in range(3):
        try:
            result = await runtime.invoke(
                SERVER,
                tool,
                arguments,
                input_responses=responses,
                request_state=state,
                handle=handle,
                acting=WHO,
            )
        except SignInRequiredError as needed:
            assert person is not None
            await _sign_in(person, needed)
            continue
        except InputRequiredError as asked:
            responses, state, handle = _answers(asked.requests), asked.request_state, asked.handle
            continue
        print(f"{tool}: {json.dumps(result.data)[:500]}")
        return
    raise RuntimeError(f"{tool}: no result after three rounds")


async def run(url: str, scenario: str, context: dict[str, Any]) -> None:
    servers = parse_mcp_servers([_entry(url, scenario, context)], "conformance endpoints.yml", env={})
    person: PersonOAuth | None = None
    with tempfile.TemporaryDirectory() as folder:
        if servers[SERVER].acts_as_person:
            store = TokenStore.open(
                str(Path(folder) / "tokens.sqlite3"), Keys.from_secret(secrets.token_bytes(32))
            )
            person = PersonOAuth(servers, store)
        runtime = MCPRuntime(servers, person_oauth=person, connect_timeout=20.0)
        try:
            for _ in range(2):
                try:
                    tools = await runtime.tools(SERVER, acting=WHO)
                    break
                except SignInRequiredError as needed:
                    assert person is not None
                    await _sign_in(person, needed)
            for name, tool in sorted(tools.items()):
                wanted = set(tool.input_schema.get("properties", {}))
                await _call(runtime, name, {key: ARGUMENTS[key] for key in wanted & ARGUMENTS.keys()}, person)
        finally:
            await runtime.aclose()


def main() -> None:
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    asyncio.run(run(sys.argv[-1], os.environ["MCP_CONFORMANCE_SCENARIO"], context))


if __name__ == "__main__":
    main()
