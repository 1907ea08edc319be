"""The sign-in route of servers that act as the person, served by the action server.

``/mcp-bridge/oauth/callback`` (the ``redirect_uri`` of such a server's ``oauth:`` block points here,
through whatever public address the action server has) takes the steps a browser makes, and binds
the sign-in to the chat that asked for it and to that browser (:mod:`mcp_bridge.auth.person`):

* ``GET ?start=<ticket>``: the link shown in the chat. It takes nothing (a link previewer or a mail
  scanner may fetch it first): the page says whom the sign-in will serve (the person as the chat
  names them, what the assistant was asked to do, when, and where they will sign in) and asks for
  the code the chat showed beside the link, with a button;
* ``POST start=&code=`` (that page's form): good once, with the right code. It sets a cookie
  holding a random browser secret (``HttpOnly; SameSite=Lax``, its path this route's; ``__Host-``
  and ``Secure`` on https) and redirects to the authorization server with a state sealed with that
  secret's digest. Someone lured to another's link, who has not that chat's code, gets no further;
* ``GET ?state=&code=&iss=``: the authorization server's redirect. Refused, nothing taken or stored,
  without the cookie of the browser that opened the link; otherwise the code is exchanged and the
  page shows which account signed in and whom it will serve, with "Use this account" and "Not me";
* ``POST ticket=&choice=`` (that page's form, a sealed ticket bound to the same cookie): "Use this
  account" stores the person's tokens encrypted; "Not me" drops (and revokes) them.

The route needs no action server token (a browser brings none): the ticket, the code, the state and
the cookie authenticate it. A POST counts only with the ``Origin`` of the redirect URI
(:mod:`mcp_bridge.auth.browser`'s ``origin_required``): another site's page cannot post the forms.
Every page says ``Cache-Control: no-store`` and ``Referrer-Policy: same-origin`` (the ticket in a
page's URL goes to no other site) and may not be framed; query values and the form are size-limited.

Then the conversation goes on where it was: "Use this account" asks Rasa (its HTTP API, through
:mod:`mcp_bridge.action_server.rasa_api`) to trigger the intent ``mcp_signed_in`` in that conversation, with
a sealed entity that :class:`mcp_bridge.action_server.person_actions.ResumeAfterSignIn` checks before it
runs the skill again from its slots. Any replica can take each step: tickets and states are sealed with the
shared key and the verifier and held tokens are in the shared store.
"""

from __future__ import annotations

import html
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from sanic import Sanic, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.action_server import rasa_api
from mcp_bridge.auth.browser import PageOrigin
from mcp_bridge.auth.person import (
    CALLBACK_PATH,
    CONFIRM_SECONDS,
    SIGN_IN_SECONDS,
    PersonOAuth,
    SignedIn,
    SignInError,
)
from mcp_bridge.contract import RESUME_ENTITY, RESUME_INTENT

log = logging.getLogger(__name__)

# How long the conversation's resume stays good after the person confirmed the account.
RESUME_SECONDS = 120
# Longer query values are refused unread (a state is a few hundred characters, a code fewer).
MAX_PARAM_CHARS = 4096
# A longer confirmation form is refused unread (its ticket is well under 2,000 characters).
MAX_FORM_BYTES = 8192
# The browser-binding cookie: ``__Host-`` on https (no Domain, Path=/, Secure), plain on loopback http.
COOKIE = "mcp_bridge_sign_in"
SECURE_COOKIE = "__Host-" + COOKIE
_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32); fullmatch, linear
_HEADERS = {
    "Cache-Control": "no-store",
    # Not no-referrer: a form posted from a page under it carries "Origin: null", which no POST here
    # is taken with. The ticket in this page's URL goes to no other site either way.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


def attach(app: Sanic[Any, Any], person: PersonOAuth) -> None:
    origin = PageOrigin(person.callback_origins(), 0)

    @app.route(CALLBACK_PATH, methods=["GET", "POST"], name="mcp_bridge_oauth_callback")
    async def callback(request: Request) -> HTTPResponse:
        if request.method == "POST":
            if not origin.allows(request.headers.get("origin"), request.headers.get("sec-fetch-site")):
                return _page("This answer does not come from the sign-in page. Nothing was stored.", 403)
            form = _form(request)
            if form is None:
                return _page("This is not the sign-in page's answer. Nothing was stored.", 400)
            if "start" in form:
                return await _start(form["start"], form.get("code", ""), person)
            return await _confirm(form, request, person)
        values = {key: request.args.get(key) for key in ("start", "state", "code", "iss", "error")}
        if any(value is not None and len(value) > MAX_PARAM_CHARS for value in values.values()):
            return _page("This sign-in answer is too long to be real. Nothing was stored.", 400)
        if values["start"]:
            return await _invitation(values["start"], person)
        if not values["state"]:
            return _page("This page is only reached from a sign-in link. Nothing was stored.", 400)
        try:
            linked = await person.complete(
                values["state"], values["code"], values["iss"], values["error"], browser=_browser(request)
            )
        except SignInError as exc:
            return _page(f"Not signed in: {exc}. Nothing was stored.", 400)
        return _choice(linked.account, linked.domain, linked.ticket, linked.signed)


def _form(request: Request) -> dict[str, str] | None:
    """The posted form (one value a field), or None when it is no form of these pages."""
    body = request.body or b""
    kind = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if len(body) > MAX_FORM_BYTES or kind != "application/x-www-form-urlencoded":
        return None
    try:
        parsed = parse_qs(body.decode("ascii"), max_num_fields=4)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in parsed.items()}


async def _invitation(ticket: str, person: PersonOAuth) -> HTTPResponse:
    """The link's page: whom the sign-in serves, and the code; nothing is taken."""
    try:
        invited = await person.invitation(ticket)
    except SignInError as exc:
        return _page(f"Not signed in: {exc}. Nothing was stored.", 400)
    asked = time.strftime("%H:%M UTC", time.gmtime(invited.asked_at))
    body = (
        "<!doctype html><html lang=en><meta charset=utf-8><title>Sign-in</title><body>"
        f"<p id=message>The assistant asks you to sign in at <strong>{html.escape(invited.domain)}"
        f"</strong> so that it can write to {html.escape(invited.server)} as you, for "
        f"<strong id=who>{html.escape(chat_name(invited.person))}</strong> in the chat, where it was "
        f"asked at {asked}{_doing(invited.skill)}.</p>"
        "<form method=post action=callback>"
        f'<input type=hidden name=start value="{html.escape(ticket)}">'
        "<p><label for=code>The code the chat showed beside this link</label> "
        "<input id=code name=code autocomplete=off required maxlength=12></p>"
        f"<button type=submit>Continue to {html.escape(invited.domain)}</button></form>"
        "<p>Not your chat, or no code there? Close this page: nothing happens.</p></body></html>"
    )
    # The form's answer redirects to the authorization server: the policy lets the form go there.
    headers = dict(_HEADERS)
    headers["Content-Security-Policy"] = (
        f"default-src 'none'; form-action 'self' {invited.authorization_origin}; "
        "frame-ancestors 'none'; base-uri 'none'"
    )
    return response.html(body, status=200, headers=headers)


def chat_name(identity: str) -> str:
    """The person as the chat names them, in words: ``socketio:dana`` is "dana (socketio)"."""
    channel, _, name = identity.partition(":")
    return f"{name} ({channel})" if name else identity


def _doing(skill: str | None) -> str:
    return f" to {skill.replace('_', ' ')}" if skill else ""


async def _start(ticket: str, code: str, person: PersonOAuth) -> HTTPResponse:
    secret = secrets.token_urlsafe(32)
    try:
        started = await person.start(ticket, secret, code)
    except SignInError as exc:
        return _page(f"Not signed in: {exc}. Nothing was stored.", 400)
    name, attributes = (
        (SECURE_COOKIE, "; Path=/; Secure") if started.secure else (COOKIE, f"; Path={started.path}")
    )
    headers = dict(_HEADERS)
    # Good for as long as the state, then the "which account" page (the cookie is useless after).
    lifetime = SIGN_IN_SECONDS + CONFIRM_SECONDS
    headers["Set-Cookie"] = f"{name}={secret}{attributes}; Max-Age={lifetime}; HttpOnly; SameSite=Lax"
    return response.redirect(started.url, status=303, headers=headers)


async def _confirm(form: dict[str, str], request: Request, person: PersonOAuth) -> HTTPResponse:
    ticket, choice = form.get("ticket", ""), form.get("choice", "")
    if not ticket or choice not in ("use", "not-me"):
        return _page("This is not the sign-in page's answer. Nothing was stored.", 400)
    try:
        signed = await person.confirm(ticket, _browser(request), use=choice == "use")
    except SignInError as exc:
        return _page(f"Not signed in: {exc}. Nothing was stored.", 400)
    if signed is None:
        return _page(
            "Nothing was stored, and that sign-in was undone. To use another account, sign out at the "
            "authorization server, then ask again in the chat.",
            200,
        )
    if await resume(person, signed):
        return _page("Signed in; go back to the chat.", 200)
    return _page("Signed in; go back to the chat and ask again.", 200)


def _browser(request: Request) -> str | None:
    """The browser secret from the request's cookie (either name), if it is well-formed."""
    header = request.headers.get("cookie") or ""
    if len(header) > MAX_FORM_BYTES:
        return None
    found: dict[str, str] = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name in (COOKIE, SECURE_COOKIE) and _SECRET.fullmatch(value):
            found[name] = value
    return found.get(SECURE_COOKIE) or found.get(COOKIE)


# What a resume entity is sealed as: a sign-in's ticket, state or confirmation, sealed with the same key,
# carry other purposes ("start", "state", "confirm") and never open as one.
RESUME = "resume"


def resume_entity(person: PersonOAuth, signed: SignedIn) -> str:
    sealed = {
        "t": RESUME,
        "n": secrets.token_urlsafe(16),  # this resume's own: the action server's record uses it once
        "c": signed.conversation,
        "p": signed.person,
        "s": signed.server,
        "k": signed.skill,
    }
    return person.store.keys.states.encrypt(json.dumps(sealed).encode()).decode()


@dataclass(frozen=True)
class Resume:
    """A resume the sign-in callback sealed: who signed in where, and its own id (``nonce``)."""

    signed: SignedIn
    nonce: str


def open_resume(person: PersonOAuth, value: str, conversation: str) -> Resume | None:
    """The sign-in a resume entity names, if it is one we sealed as a resume (never a ticket or a state),
    recent, and for this conversation."""
    try:
        opened = json.loads(person.store.keys.states.decrypt(value.encode(), ttl=RESUME_SECONDS))
        if not isinstance(opened, dict) or opened.get("t") != RESUME or not isinstance(opened.get("n"), str):
            return None
        signed = SignedIn(str(opened["c"]), str(opened["p"]), str(opened["s"]), opened.get("k"))
    except Exception:
        return None
    return Resume(signed, opened["n"]) if signed.conversation == conversation else None


async def resume(person: PersonOAuth, signed: SignedIn) -> bool:
    """Ask Rasa to go on with the conversation (trigger ``mcp_signed_in``); False when it cannot."""
    entities = {RESUME_ENTITY: resume_entity(person, signed)}
    return await rasa_api.trigger_intent(signed.conversation, RESUME_INTENT, entities)


def _choice(account: str | None, domain: str, ticket: str, signed: SignedIn) -> HTTPResponse:
    """Which account signed in and whom it will serve, and the person's choice; nothing is stored for
    them before it."""
    who = (
        f"You signed in at {html.escape(domain)} as <strong id=account>{html.escape(account)}</strong>."
        if account
        else f"You signed in at {html.escape(domain)}; it did not say as whom."
    )
    serves = html.escape(chat_name(signed.person))
    body = (
        "<!doctype html><html lang=en><meta charset=utf-8><title>Sign-in</title><body>"
        f"<p id=message>{who} Is this the account the assistant should use for <strong id=who>{serves}"
        f"</strong> in the chat{_doing(signed.skill)}?</p>"
        "<form method=post action=callback>"
        f'<input type=hidden name=ticket value="{html.escape(ticket)}">'
        "<button type=submit name=choice value=use>Use this account</button> "
        "<button type=submit name=choice value=not-me>Not me</button>"
        "</form><p>Nothing is stored until you choose.</p></body></html>"
    )
    return response.html(body, status=200, headers=dict(_HEADERS))


def _page(message: str, status: int) -> HTTPResponse:
    text = html.escape(message)
    body = (
        "<!doctype html><html lang=en><meta charset=utf-8><title>Sign-in</title>"
        f"<body><p id=message>{text}</p></body></html>"
    )
    return response.html(body, status=status, headers=dict(_HEADERS))
