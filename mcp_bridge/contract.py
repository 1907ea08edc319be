"""The names a Rasa bot and the plugin agree on: the slots, intents, entities and actions, and every
response the plugin says (:data:`RESPONSES`).

`mcp-bridge init` writes them into a bot's domain, `mcp-bridge check` looks for them there, and the
runtime reads and writes them; all three take them from here. This module imports nothing of the
plugin, so the command-line tools use it without rasa_sdk (which :mod:`mcp_bridge.action_server`
imports).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = [
    "RESPONSES",
    "Responses",
    "AFFIRM_INTENT",
    "APPROVAL_ACTION",
    "APPROVAL_ENTITY",
    "APPROVAL_INTENT",
    "BUTTON_PAYLOADS",
    "LIST_BUTTONS",
    "TYPED_ANSWER_CHANNELS",
    "YES_NO_BUTTONS",
    "CONFIRMATION_LOOP",
    "DENY_ACTION",
    "DENY_INTENT",
    "ELICITATION_SLOT",
    "PENDING_SLOT",
    "REVOKE_ACTION",
    "REVOKE_INTENT",
    "PLUGIN_ACTIONS",
    "PLUGIN_INTENTS",
    "ACCOUNT_ACTION",
    "DISCONNECT_ACTION",
    "RESUME_ACTION",
    "RESUME_ENTITY",
    "RESUME_INTENT",
]

# The slot that carries a sealed copy of the open question (the action server's record decides
# whether it is still open: mcp_bridge/record/store.py); Rasa routes the conversation by the loop.
PENDING_SLOT = "pending_confirmation"
# The slot that carries a sealed copy of a server's open question (elicitation) and the call it stopped.
ELICITATION_SLOT = "pending_elicitation"

# The intents of a yes and a no; a question's buttons send exactly their payloads.
AFFIRM_INTENT = "affirm"
DENY_INTENT = "deny"
PLUGIN_INTENTS = (AFFIRM_INTENT, DENY_INTENT)
BUTTON_PAYLOADS = frozenset({f"/{AFFIRM_INTENT}", f"/{DENY_INTENT}"})
# The answers the plugin adds to every question it asks, as buttons where the channel shows them
# ("No" first: a stray Enter on a menu is never a yes), and as words to type where it does not. A
# question's response in the domain carries none of its own.
YES_NO_BUTTONS = (
    {"title": "No", "payload": f"/{DENY_INTENT}"},
    {"title": "Yes", "payload": f"/{AFFIRM_INTENT}"},
)
# The same for a numbered list of calls: all of them or none (an "Only <n>" button per call follows).
LIST_BUTTONS = (
    {"title": "No to all", "payload": f"/{DENY_INTENT}"},
    {"title": "Yes to all", "payload": f"/{AFFIRM_INTENT}"},
)
# Input channels where a question is asked in words, with the answers to type, and no buttons:
# `rasa shell` (Rasa's ``cmdline`` channel shows buttons as a menu that typed letters never reach).
# MCP_BRIDGE_TYPED_ANSWER_CHANNELS replaces the list (mcp_bridge.action_server.adapter).
TYPED_ANSWER_CHANNELS = ("cmdline",)

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
# "which CRM account are you using?": says which account the person is signed in as, per server.
ACCOUNT_ACTION = "action_mcp_account"


@dataclass(frozen=True)
class Responses:
    """Every response the plugin says, by what it is said for; the domain defines them
    (`mcp-bridge init` adds them, `mcp-bridge check` and the action server's start look for them).
    Variables are in brackets. Grouped by which bots need them: :meth:`for_every_bot`,
    :meth:`for_remembering`, :meth:`for_approvals`, :meth:`for_acting_as_the_person`."""

    # -- the confirmation (every bot) --------------------------------------------------------------
    nothing_pending: str = "utter_nothing_pending"
    confirm_again: str = "utter_confirm_again"
    confirmation_invalid: str = "utter_confirmation_invalid"
    tool_failed: str = "utter_tool_failed"
    tool_unavailable: str = "utter_tool_unavailable"
    tool_outcome_unknown: str = "utter_tool_outcome_unknown"
    tool_not_configured: str = "utter_tool_not_configured"
    # The question and the "no" for an MCP tool that the skill gave no constraint (the gate's remote_asks).
    confirm_tool_call: str = "utter_confirm_tool_call"
    tool_call_cancelled: str = "utter_tool_call_cancelled"
    # Said before the question again when the answer was neither a plain yes nor a plain no.
    answer_yes_or_no: str = "utter_answer_yes_or_no"
    # Said when a question left behind (the person started something else) is dropped.
    question_dropped: str = "utter_question_dropped"
    # Said instead of reading a message over the reader's limit (limit).
    message_too_long: str = "utter_message_too_long"
    # Said instead of starting a request whose for_each list is over its max_items (count, limit):
    # no lookup ran and nothing was written.
    too_many_items: str = "utter_too_many_items"
    # Said when an answer comes after the question expired (the policy's ttl), before it is asked again.
    confirmation_expired: str = "utter_confirmation_expired"
    # A question about several calls (calls, the numbered list; count); the plugin adds the buttons
    # (all, none, and one "Only <n>" per call).
    confirm_calls: str = "utter_confirm_calls"
    # The same for a list of one (one call of a request that made several; calls).
    confirm_one_call: str = "utter_confirm_one_call"
    # Said before the list again when the answer did not decide each call.
    answer_each_call: str = "utter_answer_each_call"
    # Said for each call the person refused when others were approved (place, call).
    call_skipped: str = "utter_call_skipped"
    # Said when the person refused every call of the list.
    calls_cancelled: str = "utter_calls_cancelled"
    # Said when a tool ran but its result breaks the output schema it publishes (tool_name).
    tool_result_invalid: str = "utter_tool_result_invalid"
    # Said instead of a question when the message it would start from was acted on already, or is not
    # the person's newest (the action server's record: mcp_bridge.record.store); nothing ran.
    message_used: str = "utter_message_used"
    # Said after a question where the channel shows no buttons (rasa shell): the answers to type
    # (answers: e.g. '"no" or "yes"').
    type_your_answer: str = "utter_type_your_answer"
    # Said to a request or an answer that no channel vouches for: it reached the action server
    # without the signature of the channel that authenticated the person; nothing ran.
    not_vouched: str = "utter_not_vouched"

    # -- an MCP server's own questions, elicitation (every bot) -----------------------------------
    # server, message, field, description, choices, optional
    elicitation_field: str = "utter_elicitation_field"
    elicitation_form: str = "utter_elicitation_form"  # server, message, fields
    elicitation_url: str = "utter_elicitation_url"  # server, message, domain, url
    elicitation_invalid: str = "utter_elicitation_invalid"  # server, field, reason
    # The answer to a 2025-11-25 server's question came after the server stopped waiting (tool_name):
    # it was told cancel, and its tool may have written.
    elicitation_lapsed: str = "utter_elicitation_lapsed"

    # -- remembered permission (a skill with allows_remembering) ----------------------------------
    # Said after the call a permission was given with (permission, until).
    permission_granted: str = "utter_permission_granted"
    # Said after a call that ran unasked because a permission covers it (permission, until).
    permission_used: str = "utter_permission_used"
    # Said when the person withdraws their permissions (count: how many were withdrawn).
    permissions_revoked: str = "utter_permissions_revoked"
    # Said after the call a yes for this time only ran ("yes, but ask me next time"): nothing was kept.
    permission_declined: str = "utter_permission_declined"

    # -- a second approver (a skill with requires_approval_from) ----------------------------------
    # Variables: the call's (``arg_...``, slots), and for the waiting one approval_role and
    # approval_expires_after. The requester confirmed; the call waits for a person with the role.
    approval_waiting: str = "utter_awaiting_approval"
    # Refused by the approver; nothing was written.
    approval_refused: str = "utter_approval_refused"
    # Not decided (or not run) in time; nothing was written.
    approval_expired: str = "utter_approval_expired"
    # An approval cannot be asked for here (the channel names nobody, or no store); nothing written.
    approval_unavailable: str = "utter_approval_unavailable"

    # -- an MCP server that acts as the person ----------------------------------------------------
    sign_in: str = "utter_mcp_sign_in"  # server, domain, link
    sign_in_again: str = "utter_mcp_sign_in_again"  # server, domain, link
    # Said right after either: the code the link's page asks for, shown nowhere else (code).
    sign_in_code: str = "utter_mcp_sign_in_code"
    nobody_to_act_as: str = "utter_mcp_nobody_to_act_as"  # server
    disconnected: str = "utter_mcp_disconnected"  # servers
    not_connected: str = "utter_mcp_not_connected"
    # Which account the person is signed in as (accounts: "crm as dana@example.com", one per server).
    signed_in_as: str = "utter_mcp_signed_in_as"
    # The person is signed in nowhere through the bridge.
    signed_in_nowhere: str = "utter_mcp_signed_in_nowhere"

    def for_remembering(self) -> set[str]:
        return {
            self.permission_granted,
            self.permission_used,
            self.permissions_revoked,
            self.permission_declined,
        }

    def for_approvals(self) -> set[str]:
        return {
            self.approval_waiting,
            self.approval_refused,
            self.approval_expired,
            self.approval_unavailable,
        }

    def for_acting_as_the_person(self) -> set[str]:
        return {
            self.sign_in,
            self.sign_in_again,
            self.sign_in_code,
            self.nobody_to_act_as,
            self.disconnected,
            self.not_connected,
            self.signed_in_as,
            self.signed_in_nowhere,
        }

    def for_every_bot(self) -> set[str]:
        """The responses every bot needs: all but those of the three groups above."""
        optional = self.for_remembering() | self.for_approvals() | self.for_acting_as_the_person()
        return set(asdict(self).values()) - optional


RESPONSES = Responses()
