"""The plugin's actions for servers that act as the person: going on after a sign-in, which account is
in use, disconnecting.

``action_mcp_resume`` answers the intent the sign-in callback triggers (``mcp_signed_in``,
:mod:`mcp_bridge.action_server.sign_in`): it checks the sealed entity (ours, recent, this conversation) and
runs the skill again from its slots, as the person who signed in, so it asks its confirmation
question as usual. The sign-in never counts as the confirmation: the skill only *asks*.

``action_mcp_account`` ("which CRM account are you using?") says, for each server the person is
signed in to through the bridge, the account the sign-in page showed them; ``action_mcp_disconnect``
("disconnect my CRM", "sign me out") removes the person's tokens for every server that acts as the
person, and revokes them at the authorization server where it can.

When a server needs the person's sign-in, the bot says the link with its domain in plain sight
(``utter_mcp_sign_in``), then the code the link's page asks for (``utter_mcp_sign_in_code``): only
this chat shows it, so only the person in it can go on from the link.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any

from rasa_sdk import Action, Tracker
from rasa_sdk.executor import CollectingDispatcher
from rasa_sdk.types import DomainDict

from mcp_bridge.action_server.adapter import answers_typed, apply_decision, turn_from_tracker
from mcp_bridge.action_server.build import executor
from mcp_bridge.action_server.sign_in import open_resume
from mcp_bridge.auth.person import PersonOAuth, SignInRequiredError
from mcp_bridge.confirmation.decisions import Decision, Say
from mcp_bridge.contract import (
    ACCOUNT_ACTION,
    DISCONNECT_ACTION,
    PENDING_SLOT,
    RESPONSES,
    RESUME_ACTION,
    RESUME_ENTITY,
)

log = logging.getLogger(__name__)


def sign_in_decision(exc: SignInRequiredError, *, answering: bool = False) -> Decision:
    """What the person hears when a server needs their sign-in: the link, its domain in plain sight.

    ``answering``: it came while a yes was being carried out (the token could not be renewed); that
    question is closed unrun (the executor audited it), and the skill asks again after the sign-in."""
    slots = {PENDING_SLOT: None} if answering else {}
    if exc.link is None:
        return Decision("unavailable", [Say(RESPONSES.nobody_to_act_as, {"server": exc.server})], slots)
    response = RESPONSES.sign_in_again if exc.again else RESPONSES.sign_in
    variables = {"server": exc.server, "domain": exc.link.domain, "link": exc.link.url}
    code = Say(RESPONSES.sign_in_code, {"server": exc.server, "code": exc.link.code})
    return Decision("unavailable", [Say(response, variables), code], slots)


def person_oauth() -> PersonOAuth | None:
    runtime = executor().tools.runtime
    return runtime.person_oauth if runtime is not None else None


class ResumeAfterSignIn(Action):
    def name(self) -> str:
        return RESUME_ACTION

    async def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> list[dict[str, Any]]:
        turn = turn_from_tracker(tracker)
        person = person_oauth()
        entities = (tracker.latest_message or {}).get("entities") or []
        sealed = next(
            (e.get("value") for e in entities if isinstance(e, dict) and e.get("entity") == RESUME_ENTITY),
            None,
        )
        resumed = (
            open_resume(person, sealed, turn.conversation_id)
            if person is not None and isinstance(sealed, str)
            else None
        )
        skill = executor().skills.get(resumed.signed.skill or "") if resumed is not None else None
        if resumed is None or skill is None:
            # Whoever writes a tracker can trigger this (a ticket, a state, another conversation's resume):
            # nothing starts, and the attempt is audited.
            reason = (
                "not a resume the sign-in sealed for this conversation, or past its lifetime"
                if resumed is None
                else "its skill is not one of this bot's"
            )
            log.warning("conversation %s: a resume after sign-in ignored: %s", turn.conversation_id, reason)
            executor().audit.record(
                conversation=turn.conversation_id, user=turn.user, decision="not_started", result=reason
            )
            return []
        # The sealed resume vouches for the person (the trigger itself is Rasa's API, unsigned), and is the
        # message the record lets start one question or run, once.
        turn = replace(
            turn,
            user=resumed.signed.person,
            new_message=False,
            unvouched=None,
            said_at=None,
            message_id=f"resume:{resumed.nonce}",
        )
        try:
            decision = await executor().start(skill.id, turn)
        except SignInRequiredError as exc:
            decision = sign_in_decision(exc)
        except Exception:
            log.exception(
                "%s failed in conversation %s; nothing was written", RESUME_ACTION, turn.conversation_id
            )
            decision = Decision("failed", [Say(RESPONSES.tool_unavailable)])
        return apply_decision(
            decision,
            dispatcher,
            action=RESUME_ACTION,
            loop_active=turn.loop_active,
            typed=answers_typed(turn.input_channel),
        )


class _AboutThePersonsSignIns(Action, ABC):
    """An action about the person's own sign-ins: says nothing of anyone when the channel names nobody or
    no server acts as the person, and that the answer is unavailable when the token store fails.
    Abstract, so rasa_sdk registers only the concrete actions (``inspect.isabstract``)."""

    @property
    @abstractmethod
    def action_name(self) -> str: ...

    def name(self) -> str:
        return self.action_name

    @abstractmethod
    async def answer(self, person: PersonOAuth, user: str) -> tuple[str, dict[str, str]]:
        """The response to say, and its variables."""

    async def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> list[dict[str, Any]]:
        turn = turn_from_tracker(tracker)
        person = person_oauth()
        if turn.user is None or person is None:
            dispatcher.utter_message(response=RESPONSES.nobody_to_act_as)
            return []
        try:
            response, variables = await self.answer(person, turn.user)
        except Exception:
            log.exception("%s failed in conversation %s", self.action_name, turn.conversation_id)
            response, variables = RESPONSES.tool_unavailable, {}
        dispatcher.utter_message(response=response, **variables)
        return []


class AccountInUse(_AboutThePersonsSignIns):
    """Which account each server acts as for the person."""

    action_name = ACCOUNT_ACTION

    async def answer(self, person: PersonOAuth, user: str) -> tuple[str, dict[str, str]]:
        accounts = await person.accounts(user)
        if not accounts:
            return RESPONSES.signed_in_nowhere, {}
        named = [
            f"{server} as {account or 'an account it did not name'}" for server, account in accounts.items()
        ]
        return RESPONSES.signed_in_as, {"accounts": ", ".join(named)}


class DisconnectPerson(_AboutThePersonsSignIns):
    """The person signed out of every server that acts as them (tokens removed and revoked)."""

    action_name = DISCONNECT_ACTION

    async def answer(self, person: PersonOAuth, user: str) -> tuple[str, dict[str, str]]:
        removed = await person.disconnect(user)
        if removed:
            return RESPONSES.disconnected, {"servers": ", ".join(removed)}
        return RESPONSES.not_connected, {}
