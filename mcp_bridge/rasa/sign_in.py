"""The sign-in callback of servers that act as the person, served by the action server.

``GET /mcp-bridge/oauth/callback`` (the ``redirect_uri`` of such a server's ``oauth:`` block points
here, through whatever public address the action server has): checks the sealed state, exchanges
the code, stores the person's tokens encrypted (:mod:`mcp_bridge.person_oauth`) and answers a
plain page. The route needs no action server token (a browser brings none); the state is what
authenticates the request, and it is good once.

Then the conversation goes on where it was: with RASA_URL and RASA_AUTH_TOKEN set, the callback
asks Rasa (its HTTP API, ``--enable-api``) to trigger the intent ``mcp_signed_in`` in that
conversation, with a sealed entity that :class:`mcp_bridge.rasa.person_actions.ResumeAfterSignIn`
checks before it runs the skill again from its slots. Any replica can take the callback: the
state is sealed with the shared key and the tokens go to the shared store.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import os
from typing import Any
from urllib.parse import quote

import aiohttp
from sanic import Sanic, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.contract import RESUME_ENTITY, RESUME_INTENT
from mcp_bridge.person_oauth import CALLBACK_PATH, PersonOAuth, SignedIn, SignInError

log = logging.getLogger(__name__)

# How long the conversation's resume stays good after the callback.
RESUME_SECONDS = 120
# Longer query values are refused unread (a state is a few hundred characters, a code fewer).
MAX_PARAM_CHARS = 4096


def attach(app: Sanic[Any, Any], person: PersonOAuth) -> None:
    @app.get(CALLBACK_PATH, name="mcp_bridge_oauth_callback")
    async def callback(request: Request) -> HTTPResponse:
        values = {key: request.args.get(key) for key in ("state", "code", "iss", "error")}
        if any(value is not None and len(value) > MAX_PARAM_CHARS for value in values.values()):
            return _page("This sign-in answer is too long to be real. Nothing was stored.", 400)
        if not values["state"]:
            return _page("This page is only reached from a sign-in link. Nothing was stored.", 400)
        try:
            signed = await person.complete(values["state"], values["code"], values["iss"], values["error"])
        except SignInError as exc:
            return _page(f"Not signed in: {exc}. Nothing was stored.", 400)
        resumed = await resume(person, signed)
        if resumed:
            return _page("Signed in; go back to the chat.", 200)
        return _page("Signed in; go back to the chat and ask again.", 200)


def resume_entity(person: PersonOAuth, signed: SignedIn) -> str:
    sealed = {"c": signed.conversation, "p": signed.person, "s": signed.server, "k": signed.skill}
    return person.store.keys.states.encrypt(json.dumps(sealed).encode()).decode()


def open_resume(person: PersonOAuth, value: str, conversation: str) -> SignedIn | None:
    """The sign-in a resume entity names, if it is sealed by us, recent, and for this conversation."""
    try:
        opened = json.loads(person.store.keys.states.decrypt(value.encode(), ttl=RESUME_SECONDS))
        signed = SignedIn(str(opened["c"]), str(opened["p"]), str(opened["s"]), opened.get("k"))
    except Exception:
        return None
    return signed if signed.conversation == conversation else None


async def resume(person: PersonOAuth, signed: SignedIn) -> bool:
    """Ask Rasa to go on with the conversation (trigger ``mcp_signed_in``); False when it cannot."""
    rasa_url, token = os.environ.get("RASA_URL"), os.environ.get("RASA_AUTH_TOKEN")
    if not rasa_url or not token:
        log.info("signed in; RASA_URL or RASA_AUTH_TOKEN not set, so the conversation is not resumed")
        return False
    where = f"{rasa_url.rstrip('/')}/conversations/{quote(signed.conversation, safe='')}/trigger_intent"
    body = {"name": RESUME_INTENT, "entities": {RESUME_ENTITY: resume_entity(person, signed)}}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
            # output_channel=latest: the bot's next messages go where the person chats (the chat
            # page's socket.io room), not back to this request.
            http.post(where, params={"token": token, "output_channel": "latest"}, json=body) as answer,
        ):
            if answer.status == 200:
                return True
            log.warning("Rasa did not resume conversation %s (HTTP %s)", signed.conversation, answer.status)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # not the builtin before Python 3.11
        log.warning("Rasa did not resume conversation %s: %s", signed.conversation, type(exc).__name__)
    return False


def _page(message: str, status: int) -> HTTPResponse:
    text = html.escape(message)
    body = (
        "<!doctype html><html lang=en><meta charset=utf-8><title>Sign-in</title>"
        f"<body><p id=message>{text}</p></body></html>"
    )
    headers = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
    return response.html(body, status=status, headers=headers)
