"""The names a Rasa bot and the plugin agree on: two slots, two intents, two actions.

`mcp-bridge init` writes them into a bot's domain, `mcp-bridge check` looks for them there, and the
runtime reads and writes them; all three take them from here. This module imports nothing, so the
command-line tools use it without rasa_sdk (``mcp_bridge.rasa`` imports rasa_sdk on import).
"""

from __future__ import annotations

__all__ = [
    "AFFIRM_INTENT",
    "APPROVAL_ACTION",
    "APPROVAL_ENTITY",
    "APPROVAL_INTENT",
    "BUTTON_PAYLOADS",
    "CONFIRMATION_LOOP",
    "DENY_ACTION",
    "DENY_INTENT",
    "ELICITATION_SLOT",
    "PENDING_SLOT",
    "PERMISSIONS_SLOT",
    "REVOKE_ACTION",
    "REVOKE_INTENT",
    "PLUGIN_ACTIONS",
    "PLUGIN_INTENTS",
    "DISCONNECT_ACTION",
    "RESUME_ACTION",
    "RESUME_ENTITY",
    "RESUME_INTENT",
]

# The slot that carries the sealed pending question between turns (the action server is stateless).
PENDING_SLOT = "pending_confirmation"
# The slot that carries a server's pending question (elicitation) and the call it stopped, sealed.
ELICITATION_SLOT = "pending_elicitation"

# The slot that carries the conversation's remembered permissions, each sealed
# (mcp_bridge/confirmation/permissions.py).
PERMISSIONS_SLOT = "remembered_permissions"

# The intents of a yes and a no; a question's buttons send exactly their payloads.
AFFIRM_INTENT = "affirm"
DENY_INTENT = "deny"
PLUGIN_INTENTS = (AFFIRM_INTENT, DENY_INTENT)
BUTTON_PAYLOADS = frozenset({f"/{AFFIRM_INTENT}", f"/{DENY_INTENT}"})

# The action that reads an answer; it is also the loop a pending question keeps active, so Rasa
# sends the person's next message to it whatever intent the NLU gave that message.
CONFIRMATION_LOOP = "action_confirm_tool"
# The action that drops a pending question without running anything (for a bot's own "stop" rule).
DENY_ACTION = "action_deny_tool"
PLUGIN_ACTIONS = (CONFIRMATION_LOOP, DENY_ACTION)

# "stop saving without asking": the intent (examples from `mcp-bridge init`) and the action that
# withdraws every remembered permission of the person in the conversation
# (mcp_bridge/confirmation/permissions.py).
REVOKE_INTENT = "revoke_permissions"
REVOKE_ACTION = "action_revoke_permissions"

# A second approver's decision reaches the requester's conversation as this intent, sent with Rasa's
# HTTP API (`POST /conversations/<id>/trigger_intent`) with the request's id as this entity; a rule
# runs the action, which runs an approved call once or says the refusal
# (mcp_bridge/approvals/second_approver.py).
APPROVAL_INTENT = "approval_decided"
APPROVAL_ENTITY = "approval_id"
APPROVAL_ACTION = "action_approval_decided"

# For an MCP server that acts as the person: the intent the sign-in callback triggers (with a sealed
# entity) and the action that goes on from there; the action that forgets the person's sign-ins.
RESUME_INTENT = "mcp_signed_in"
RESUME_ENTITY = "mcp_sign_in"
RESUME_ACTION = "action_mcp_resume"
DISCONNECT_ACTION = "action_mcp_disconnect"
