"""Going on with a conversation from outside a turn: an intent triggered through Rasa's HTTP API.

Two things happen outside any turn of the person's: a sign-in completes in their browser
(:mod:`mcp_bridge.action_server.sign_in`), and a second approver decides a held call on the approval page
(:mod:`mcp_bridge.action_server.approval_tell`). Either way the action server asks Rasa (``RASA_URL``, started
with ``--enable-api``, its token ``RASA_AUTH_TOKEN``) to trigger an intent in that conversation
(``POST /conversations/<id>/trigger_intent``); the action the intent leads to checks what it was
given (a sealed resume, a request in the approval store) before it does anything. The action server
is the only process of the plugin that holds Rasa's token.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from urllib.parse import quote

import aiohttp

from mcp_bridge.action_server.build import settings

log = logging.getLogger(__name__)


def configured() -> bool:
    """RASA_URL and RASA_AUTH_TOKEN are set: conversations can be gone on with."""
    return bool(settings().rasa_url and settings().rasa_auth_token)


async def trigger_intent(conversation: str, intent: str, entities: Mapping[str, str]) -> bool:
    """Trigger ``intent`` with ``entities`` in ``conversation``; False (logged) when Rasa cannot be
    asked or did not take it."""
    rasa_url, token = settings().rasa_url, settings().rasa_auth_token
    if not rasa_url or not token:
        log.info("RASA_URL or RASA_AUTH_TOKEN not set, so conversation %s is not gone on with", conversation)
        return False
    where = f"{rasa_url.rstrip('/')}/conversations/{quote(conversation, safe='')}/trigger_intent"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
            # output_channel=latest: the bot's next messages go where the person chats (the chat
            # page's socket.io room), not back to this request.
            http.post(
                where,
                params={"token": token, "output_channel": "latest"},
                json={"name": intent, "entities": dict(entities)},
            ) as answer,
        ):
            if answer.status == 200:
                return True
            log.warning(
                "Rasa did not take %s in conversation %s (HTTP %s)", intent, conversation, answer.status
            )
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # not the builtin before Python 3.11
        log.warning(
            "Rasa not reached for %s in conversation %s: %s", intent, conversation, type(exc).__name__
        )
    return False
