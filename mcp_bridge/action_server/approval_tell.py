"""The action server's route the approval page asks to tell a requester's conversation of a decision.

``POST /mcp-bridge/approvals/tell`` with ``{"id": "<request id>"}`` and ``Authorization: Bearer
<APPROVAL_TELL_TOKEN>`` (the page's, and only it: it lets its holder ask this, nothing else). The
action server reads the request from the approval store both share; if there is something to tell
(decided and not told yet, or running past its lease: ``lost_run``) and the request's sealed question
opens for the request's conversation (:meth:`~mcp_bridge.approvals.second_approver.Approvals.sealed`:
a row whose conversation was changed in the database names none), it triggers ``approval_decided``
with the request's id in that conversation, through Rasa's HTTP API
(:mod:`mcp_bridge.action_server.rasa_api`). Nothing the caller sends names a conversation or says what was
decided; the action that runs (``action_approval_decided``) takes the request from the store once.

So the approval page holds no Rasa token and nothing else that writes to a conversation: a leaked tell
token lets its holder have the conversations of requests already decided told again, which their
actions ignore; and the page's access to the approval store lets it have no other conversation told
anything. Answers: 200 ``{"told": true}``; 401 without the token; 400 without a request id; 404 for a
request the store does not have; 409 when there is nothing to tell, or the request's seal does not
hold (audited, ``approval_rejected``); 502 when Rasa did not take it (the page's sweep asks again
later).
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from typing import Any

from sanic import Sanic, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.action_server import rasa_api
from mcp_bridge.approvals.page import TELL_PATH
from mcp_bridge.approvals.second_approver import ApprovalRequest, Approvals
from mcp_bridge.contract import APPROVAL_ENTITY, APPROVAL_INTENT
from mcp_bridge.sealing import Seal

__all__ = ["attach", "to_tell"]

log = logging.getLogger(__name__)

_ID = re.compile(r"[0-9a-f]{32}")
MAX_BODY_BYTES = 1024


def to_tell(request: ApprovalRequest) -> bool:
    """The request's conversation has something to hear: an undecided or finished request, or a
    refusal or an expiry it was told, has not."""
    if request.status in ("pending", "done"):
        return False
    return not (request.status in ("refused", "expired") and request.told)


def attach(app: Sanic[Any, Any], approvals: Approvals, seal: Seal, token: str) -> None:
    @app.post(TELL_PATH, name="mcp_bridge_approval_tell")
    async def tell(request: Request) -> HTTPResponse:
        scheme, _, supplied = (request.headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.strip().encode(), token.encode()):
            return response.json({"error": "missing or wrong approval tell token"}, status=401)
        body = request.body or b""
        try:
            given = json.loads(body) if 0 < len(body) <= MAX_BODY_BYTES else None
        except ValueError:
            given = None
        request_id = given.get("id") if isinstance(given, dict) else None
        if not isinstance(request_id, str) or not _ID.fullmatch(request_id):
            return response.json({"error": "a request id, please"}, status=400)
        found = await approvals.store.get(request_id)
        if found is None:
            return response.json({"error": "no such request"}, status=404)
        if not to_tell(found):
            return response.json({"error": "nothing to tell"}, status=409)
        if approvals.sealed(found, seal) is None:  # not the conversation's: changed in the store
            log.warning("approval %s: its sealed question does not hold; its conversation not told", found.id)
            return response.json({"error": "the request does not match its sealed question"}, status=409)
        told = await rasa_api.trigger_intent(
            found.conversation_id, APPROVAL_INTENT, {APPROVAL_ENTITY: found.id}
        )
        if not told:
            return response.json({"error": "Rasa did not take it; ask again later"}, status=502)
        log.info("approval %s: its conversation was told", found.id)
        return response.json({"told": True})
