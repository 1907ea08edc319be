"""The Rasa adapter: tracker in, :class:`Turn` out; :class:`Decision` in, events out.

Who sent the latest message is what the channel that authenticated them signed
(:mod:`mcp_bridge.channels.proof`), checked here against the tracker's conversation and the
message's text with the action servers' channel key (:class:`ChannelCheck`): a tracker posted to
the action server, or a user event appended through Rasa's HTTP API, carries no proof that holds,
so its turn names nobody and is marked unvouched, and the executor lets it start and answer nothing.

A pending question is a Rasa *loop*: the action that asks it activates ``action_confirm_tool`` as
the conversation's active loop, so Rasa sends the person's next message to that action whatever
intent the NLU gave it. The loop reads the answer; an answer that is not about the question is
handed back (the action rejects itself, Rasa's own rules handle the message), and Rasa runs the loop
again afterwards, which asks the question again.

The rejection is an ``action_execution_rejected`` event in a normal answer, not rasa_sdk's
``ActionExecutionRejection`` (HTTP 400): Rasa treats both alike (the loop is marked rejected, the
action is not recorded as run, the policies predict the next action), but logs the HTTP 400 at ERROR
level, and a hand-back is normal behaviour, not an error in a deployment's alerting.

A question's answers (:attr:`Say.buttons`) become buttons, or, on a channel that shows none
(:func:`answers_typed`: ``rasa shell`` by default), the question in words followed by the answers to
type (``utter_type_your_answer``): Rasa's command line shows buttons as a menu whose first entry Enter
picks, and a typed "yes" would never reach a text prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rasa_sdk import Tracker
from rasa_sdk.events import ActionExecutionRejected, ActiveLoop, SlotSet
from rasa_sdk.executor import CollectingDispatcher

from mcp_bridge.action_server.build import DEVELOPMENT_FLAG, settings
from mcp_bridge.channels.proof import KEY_ENV, PROOF_KEY, ChannelKeys, Unvouched
from mcp_bridge.config.settings import Settings
from mcp_bridge.confirmation.decisions import Decision, Turn
from mcp_bridge.contract import CONFIRMATION_LOOP, PENDING_SLOT, RESPONSES
from mcp_bridge.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sender:
    """Who the channel vouches sent a message, and when it received it; or why nobody is vouched."""

    user: str | None = None
    said_at: float | None = None
    unvouched: str | None = None
    # The message's id for the action server's record (None: nothing vouches for it).
    message_id: str | None = None


@dataclass(frozen=True)
class ChannelCheck:
    """How this action server checks who sent a message: the channels' keys, and whether a message
    without any signature is taken as from nobody (development) or refused."""

    keys: ChannelKeys | None
    allow_unsigned: bool = False

    @classmethod
    def from_settings(cls, config: Settings) -> ChannelCheck:
        """From MCP_BRIDGE_CHANNEL_KEY, or MCP_BRIDGE_DEVELOPMENT (development only: messages without a
        channel's signature are taken as from nobody instead of refused, for ``rasa shell`` and Rasa's
        own channels); ConfigError when neither or both are set (a deployment with a channel key is no
        trial, and development mode must not leak into it)."""
        development = config.development
        raw = config.channel_key
        if raw and development:
            raise ConfigError(
                f"environment variables {DEVELOPMENT_FLAG}=1 and {KEY_ENV} are both set: development mode "
                "takes unsigned messages as from nobody, which a deployment whose channels sign must never "
                f"do. Unset {DEVELOPMENT_FLAG} (or, for a trial with rasa shell, unset {KEY_ENV})"
            )
        keys = None
        if raw:
            try:
                keys = ChannelKeys.parse(raw)
            except ValueError as exc:
                raise ConfigError(f"environment variable {KEY_ENV}: {exc}") from None
        elif not development:
            raise ConfigError(
                f"environment variable {KEY_ENV} is not set: the action server could not tell the "
                "person's own yes from a tracker anyone posted to it. Give the Rasa server's channels "
                "(mcp_bridge.channels) and every action server the same random value (32+ characters), "
                f"or, for `rasa shell` and Rasa's own channels on your machine only, {DEVELOPMENT_FLAG}=1"
            )
        return cls(keys, allow_unsigned=development)

    def sender(self, metadata: Any, conversation: str, text: str, rasa_id: Any = None) -> Sender:
        """Who sent the message, as its channel's signature says; ``rasa_id`` (Rasa's id of the message)
        is its id in development, where nothing is signed."""
        has_proof = isinstance(metadata, Mapping) and metadata.get(PROOF_KEY) is not None
        if not has_proof and self.allow_unsigned:
            # Development: from nobody, so only a question asked of nobody is answered.
            return Sender(message_id=f"message:{rasa_id}" if isinstance(rasa_id, str) and rasa_id else None)
        if self.keys is None:
            return Sender(unvouched="a channel signature this action server has no key for")
        checked = self.keys.check(metadata, conversation=conversation, text=text)
        if isinstance(checked, Unvouched):
            return Sender(unvouched=checked.reason)
        return Sender(checked.user, checked.said_at, message_id=checked.id)


_PROCESS_CHECK: list[ChannelCheck] = []


def channel_check() -> ChannelCheck:
    """This process's check, from its environment (read once; :func:`warn_unsigned` says it at start)."""
    if not _PROCESS_CHECK:
        _PROCESS_CHECK.append(ChannelCheck.from_settings(settings()))
    return _PROCESS_CHECK[0]


def warn_unsigned(check: ChannelCheck) -> None:
    if check.allow_unsigned:
        log.warning(
            "DEVELOPMENT MODE (%s=1): messages that no channel signed are accepted as from nobody, so "
            "anyone who can post to this action server or to Rasa's HTTP API can answer a question "
            "asked of nobody. Never in production: use the plugin's channels and %s instead",
            DEVELOPMENT_FLAG,
            KEY_ENV,
        )


def turn_from_tracker(tracker: Tracker, check: ChannelCheck | None = None) -> Turn:
    """The turn of ``tracker``; its sender as ``check`` (this process's by default) finds it."""
    latest = tracker.latest_message or {}
    intent = latest.get("intent") or {}
    ranking = {
        str(item.get("name")): float(item.get("confidence") or 0.0)
        for item in latest.get("intent_ranking") or []
        if isinstance(item, dict)
    }
    conversation = str(tracker.sender_id)
    text = str(latest.get("text") or "")
    sender = (check or channel_check()).sender(
        latest.get("metadata"), conversation, text, latest.get("message_id")
    )
    return Turn(
        conversation_id=conversation,
        slots={name: whole_numbers(value) for name, value in tracker.slots.items()},
        user_turn=sum(1 for event in tracker.events if event.get("event") == "user"),
        intent=intent.get("name"),
        intent_confidence=float(intent.get("confidence") or 0.0),
        intent_ranking=ranking,
        text=text,
        new_message=tracker.latest_action_name == "action_listen",
        loop_active=tracker.active_loop_name == CONFIRMATION_LOOP,
        user=sender.user,
        said_at=sender.said_at,
        unvouched=sender.unvouched,
        input_channel=tracker.get_latest_input_channel(),
        message_id=sender.message_id,
    )


def whole_numbers(value: Any) -> Any:
    """``value`` with every integral float as an int, at any depth.

    Over gRPC (rasa-sdk 3.21, Rasa Pro) slots travel as protobuf Structs, which carry every number as
    a double: the contact id 7 that a question sealed comes back as 7.0. JSON over HTTP keeps 7.
    Reading both as 7 keeps a sealed question's arguments, and its signature, the same either way.
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def answers_typed(input_channel: str | None, channels: Sequence[str] | None = None) -> bool:
    """Whether a question asked on ``input_channel`` (the latest message's, as Rasa names it) is asked in
    words with the answers to type instead of buttons: on one of ``channels`` (default this process's
    MCP_BRIDGE_TYPED_ANSWER_CHANNELS; unset, ``cmdline``, what ``rasa shell`` sends)."""
    channels = settings().typed_answer_channels if channels is None else channels
    return input_channel is not None and input_channel in channels


def typed_answers(buttons: Sequence[Mapping[str, str]]) -> str:
    """The answers of a question's buttons as words to type: '"no", "yes" or "only 1"'. A button that
    sends an intent (/deny) is typed as its title, any other as what it sends."""
    words = [
        (b.get("title") or "").lower() if str(b.get("payload", "")).startswith("/") else str(b.get("payload"))
        for b in buttons
    ]
    quoted = [f'"{word}"' for word in words if word]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def apply_decision(
    decision: Decision,
    dispatcher: CollectingDispatcher,
    *,
    action: str,
    loop_active: bool,
    typed: bool = False,
) -> list[dict[str, Any]]:
    """Responses to the dispatcher, and the events to return; ``typed``: the channel shows no buttons,
    so a question's answers are said as words to type."""
    if decision.outcome == "handed_back":
        # Rasa applies the rejection (the loop stays active, marked rejected), does not record the
        # action as run, and lets the bot's own rules answer; nothing is said here. Rasa's processor
        # reads an action_execution_rejected event among an action's events as a rejection by hand.
        return [ActionExecutionRejected(action)]
    for say in decision.say:
        if say.buttons and typed:
            dispatcher.utter_message(response=say.response, **say.variables)
            dispatcher.utter_message(response=RESPONSES.type_your_answer, answers=typed_answers(say.buttons))
        elif say.buttons:
            dispatcher.utter_message(
                response=say.response, buttons=[dict(b) for b in say.buttons], **say.variables
            )
        else:
            dispatcher.utter_message(response=say.response, **say.variables)
    events = [SlotSet(slot, value) for slot, value in decision.slots.items()]
    question_gone = PENDING_SLOT in decision.slots and decision.slots[PENDING_SLOT] is None
    if decision.waiting:
        events.append(ActiveLoop(CONFIRMATION_LOOP))
    elif action == CONFIRMATION_LOOP or (loop_active and question_gone):
        events.append(ActiveLoop(None))
    # Otherwise (a lookup that interrupted the question) the loop stays, and Rasa runs it next.
    return events
