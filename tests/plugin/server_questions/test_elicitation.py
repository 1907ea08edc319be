"""The elicitation state machine (mcp_bridge/server_questions/elicitation.py): a server's form or URL,
asked in the chat, turn by turn, as plain data. Live round trips are in test_elicitation_live.py."""

from __future__ import annotations

from typing import Any

from mcp_bridge.server_questions import elicitation
from mcp_bridge.server_questions.elicitation import Asked, PendingElicitation, Replied, begin, reply

VISIT: dict[str, Any] = {
    "mode": "form",
    "message": "Details for the visit to dana",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "day": {
                "type": "string",
                "format": "date",
                "title": "Day",
                "description": "The day of the visit",
            },
            "attendees": {"type": "integer", "minimum": 1, "maximum": 10, "title": "Attendees"},
            "parking": {"type": "boolean", "title": "Parking"},
            "note": {"type": "string", "maxLength": 20, "title": "Note"},
        },
        "required": ["day", "attendees", "parking"],
    },
}
URL = {"mode": "url", "message": "Connect your account", "url": "https://accounts.example.com/connect?s=1"}


def asked(step: Asked | Replied) -> Asked:
    assert isinstance(step, Asked), step
    return step


def say(step: Asked | Replied) -> list[tuple[str, dict[str, Any]]]:
    return [(prompt.response, prompt.variables) for prompt in step.say]


def through_the_tracker(step: Asked) -> PendingElicitation:
    """What the next turn reads back: the slot value, round-tripped."""
    pending = PendingElicitation.from_slot(step.pending.to_slot())
    assert pending == step.pending
    return pending


def test_a_form_is_asked_one_field_at_a_time_with_the_server_named_and_each_answer_checked() -> None:
    step = asked(begin("crm", VISIT))
    ((response, variables),) = say(step)
    assert response == elicitation.ASK_FIELD
    assert variables["server"] == "crm" and variables["message"] == "Details for the visit to dana"
    assert variables["field"] == "Day" and variables["choices"] == "a date (YYYY-MM-DD)"
    # A date that is not one: the reason, and the same field again.
    step = asked(reply(through_the_tracker(step), "next tuesday"))
    assert [r for r, _ in say(step)] == [elicitation.INVALID, elicitation.ASK_FIELD]
    assert say(step)[0][1] == {"server": "crm", "field": "Day", "reason": "please give a date as YYYY-MM-DD"}
    assert say(step)[1][1]["field"] == "Day"
    step = asked(reply(through_the_tracker(step), "2026-12-03"))
    assert say(step)[0][1]["field"] == "Attendees"
    assert say(step)[0][1]["choices"] == "a whole number from 1 to 10"
    for bad, reason in (
        ("two", "please give a whole number"),
        ("0", "fails minimum 1"),
        ("11", "fails maximum 10"),
    ):
        again = asked(reply(step.pending, bad))
        assert say(again)[0][1]["reason"] == reason, bad
        assert again.pending == step.pending  # nothing recorded
    step = asked(reply(step.pending, "2"))
    assert say(step)[0][1]["field"] == "Parking" and say(step)[0][1]["choices"] == "yes or no"
    # "no" answers a yes/no field; it does not decline the form.
    step = asked(reply(step.pending, "no"))
    assert say(step)[0][1]["field"] == "Note" and "optional" in say(step)[0][1]["optional"]
    too_long = asked(reply(step.pending, "x" * 21))
    assert say(too_long)[0][1]["reason"] == "longer than 20 characters"
    done = reply(step.pending, "skip")
    assert done == Replied("accept", {"day": "2026-12-03", "attendees": 2, "parking": False})


def test_decline_and_cancel_end_the_form_and_send_nothing_typed() -> None:
    step = asked(begin("crm", VISIT))
    step = asked(reply(step.pending, "2026-12-03"))
    assert reply(step.pending, "decline") == Replied("decline")
    assert reply(step.pending, "Cancel.") == Replied("cancel")
    assert reply(step.pending, "stop") == Replied("cancel")
    assert reply(asked(begin("crm", VISIT)).pending, "no") == Replied("decline")  # a text field: no declines


def test_a_short_form_of_choices_is_shown_at_once_and_answered_in_one_reply() -> None:
    form = {
        "mode": "form",
        "message": "How should we reach you?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "channel": {"type": "string", "enum": ["email", "phone"]},
                "urgent": {"type": "boolean"},
            },
            "required": ["channel"],
        },
    }
    step = asked(begin("crm", form))
    ((response, variables),) = say(step)
    assert response == elicitation.ASK_ALL
    assert variables["fields"] == "channel: one of email, phone\nurgent: yes or no"
    wrong = asked(reply(step.pending, "channel: fax\nurgent: yes"))
    assert say(wrong)[0][1]["reason"] == "please pick one of: email, phone"
    assert reply(step.pending, "channel: Phone\nurgent: yes") == Replied(
        "accept", {"channel": "phone", "urgent": True}
    )
    missing = asked(reply(step.pending, "urgent: no"))
    assert say(missing)[0][1]["reason"] == "channel is needed"
    # Answering the first field alone goes on one field at a time.
    one = asked(reply(step.pending, "email"))
    assert say(one)[0][1]["field"] == "urgent"
    assert reply(one.pending, "yes") == Replied("accept", {"channel": "email", "urgent": True})


def test_a_url_shows_its_domain_and_needs_an_explicit_yes() -> None:
    step = asked(begin("billing", URL))
    ((response, variables),) = say(step)
    assert response == elicitation.ASK_URL
    assert variables == {
        "server": "billing",
        "message": "Connect your account",
        "domain": "accounts.example.com",
        "url": "https://accounts.example.com/connect?s=1",
    }
    unclear = asked(reply(through_the_tracker(step), "what is that?"))
    assert [r for r, _ in say(unclear)] == [elicitation.INVALID, elicitation.ASK_URL]
    assert reply(step.pending, "yes") == Replied("accept")
    assert reply(step.pending, "no") == Replied("decline")
    assert reply(step.pending, "cancel") == Replied("cancel")


def declined(step: Asked | Replied) -> str:
    """The reason a question was declined unasked."""
    assert isinstance(step, Replied) and step.action == "decline" and step.content is None, step
    assert step.say == () and step.reason, step
    return step.reason


def test_a_url_the_person_should_not_be_sent_to_is_declined_unasked() -> None:
    for url, reason in (
        ("javascript:alert(1)", "not an https address"),
        ("ftp://files.example.com/x", "not an https address"),
        ("not-a-url", "not an https address"),
        ("https://user:pw@evil.example/", "a user name or password"),
        ("https://@evil.example/", "a user name or password"),
        # plain http only on the loopback: anywhere else the page, and what the person types in it,
        # travels in the clear
        ("http://accounts.example.com/connect", "plain http"),
        ("http://127.0.0.1.evil.example/", "plain http"),
        ("http://localhost.evil.example/", "plain http"),
        ("https://exa%6Dple.com/", "not a name IDNA accepts"),  # a browser would decode it into another
        ("https://accounts.example.com/\nconnect", "a space or a control character"),
        ("https://accounts.example.com/" + "a" * elicitation.MAX_URL, "longer than"),
    ):
        assert reason in declined(begin("x", {**URL, "url": url})), url


def test_a_url_on_the_loopback_may_be_plain_http() -> None:
    for url, domain in (
        ("http://127.0.0.1:8765/connect", "127.0.0.1"),
        ("http://localhost:8765/connect", "localhost"),
        ("http://[::1]:8765/connect", "::1"),
    ):
        variables = say(asked(begin("x", {**URL, "url": url})))[0][1]
        assert (variables["url"], variables["domain"]) == (url, domain)


def test_a_host_in_another_script_is_shown_in_punycode_as_the_browser_resolves_it() -> None:
    for url, shown in (
        # Cyrillic "р" and "а" in a look-alike of paypal.com
        ("https://\u0440\u0430ypal.com/login?next=1", "https://xn--ypal-43d9g.com/login?next=1"),
        ("https://b\u00fccher.example/", "https://xn--bcher-kva.example/"),
        # IDNA 2008 (UTS 46, non-transitional), as browsers: "ß" stays itself, never "ss"
        ("https://stra\u00dfe.de/", "https://xn--strae-oqa.de/"),
        ("https://Accounts.EXAMPLE.com/Connect", "https://accounts.example.com/Connect"),
        ("https://xn--80ak6aa92e.com/", "https://xn--80ak6aa92e.com/"),  # already punycode: kept
    ):
        step = asked(begin("billing", {**URL, "url": url}))
        variables = say(step)[0][1]
        assert variables["url"] == shown and step.pending.url == shown, url
        assert variables["domain"] == shown.split("/")[2] and variables["domain"].isascii()
    for url in ("https://exa mple.com/", "https://\u2488.example/", "https://-bad-.example/"):
        assert "IDNA" in declined(begin("x", {**URL, "url": url})) or "space" in declined(
            begin("x", {**URL, "url": url})
        ), url


def form(message: str, **fields: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "form", "message": message, "requestedSchema": {"type": "object", "properties": fields}}


def test_a_form_asking_for_a_password_a_card_number_or_a_token_is_declined_unasked_saying_why() -> None:
    text = {"type": "string"}
    cases = [
        # by name
        ("password", form("Sign in", login=text, password=text)),
        ("password", form("Reset", newPassword=text)),
        ("pwd", form("Sign in", user_pwd=text)),
        ("pin", form("Unlock", pin={"type": "integer"})),
        ("one time", form("Verify", one_time_code=text)),
        ("card number", form("Pay", cardNumber=text)),
        ("card no", form("Pay", card_no=text)),
        ("cvv", form("Pay", cvv={"type": "integer"})),
        ("creditcard", form("Pay", creditcard=text)),
        ("token", form("Connect", accessToken=text)),
        ("api key", form("Connect", api_key=text)),
        ("secret", form("Connect", client_secret=text)),
        ("credentials", form("Connect", credentials=text)),
        ("private key", form("Sign", private_key=text)),
        # by title
        ("security code", form("Pay", code={"type": "string", "title": "Security code"})),
        # by description
        (
            "credit card",
            form("Pay", number={"type": "string", "description": "The 16 digits on your credit card"}),
        ),
        ("passcode", form("Unlock", value={"type": "string", "description": "Your passcode, please"})),
        # by the message, for a field the person types into
        ("verification code", form("Type the verification code we sent you", value=text)),
    ]
    for found, request in cases:
        reason = declined(begin("crm", request))
        assert f"says {found!r}" in reason, (found, reason)
    # by format, or marked write-only
    hidden = form("Sign in", value={"type": "string", "format": "password"})
    assert declined(begin("crm", hidden)) == "the field 'value' is a password field (format: password)"
    write_only = form("Connect", value={"type": "string", "writeOnly": True})
    assert "writeOnly" in declined(begin("crm", write_only))
    # the kind of thing is named, never a value
    assert (
        declined(begin("crm", form("Pay", cvv={"type": "integer"})))
        == "the field 'cvv' asks for a card number (its name says 'cvv')"
    )
    assert "a token" in declined(begin("crm", form("Connect", accessToken=text)))
    assert "a password" in declined(begin("crm", form("Unlock", pin={"type": "integer"})))


def test_ordinary_forms_are_asked_even_when_they_mention_such_things() -> None:
    text = {"type": "string"}
    for request in (
        VISIT,
        form("Shipping", shipping_address=text, secretary=text),  # "pin" and "secret" only inside words
        form("Reset Dana's password?", confirm={"type": "boolean"}),  # yes/no cannot carry a secret
        form(
            "Which card?", card={"type": "string", "enum": ["visa", "amex"]}
        ),  # nor a choice of the server's
        # told *not* to give it, as the MCP project's reference server says it
        form(
            "Tell us about you",
            integer={
                "type": "integer",
                "description": "Your favorite integer (do not give us your phone number, pin, or other "
                "sensitive info)",
            },
            note={"type": "string", "description": "Don't include passwords or card numbers."},
        ),
    ):
        assert isinstance(begin("crm", request), Asked), request
    # "don't worry" is no instruction not to give it
    assert "password" in declined(
        begin(
            "crm",
            form("Sign in", value={"type": "string", "description": "Don't worry, just type your password"}),
        )
    )


def test_a_form_the_chat_cannot_ask_is_declined_unasked() -> None:
    assert begin("x", {"mode": "form", "message": "m", "requestedSchema": {"type": "object"}}) == Replied(
        "decline"
    )
    many = {f"f{i}": {"type": "string"} for i in range(elicitation.MAX_FIELDS + 1)}
    too_many = {"mode": "form", "message": "m", "requestedSchema": {"type": "object", "properties": many}}
    assert begin("x", too_many) == Replied("decline")


def test_a_reply_over_the_limit_is_refused_unread_and_the_question_stays() -> None:
    step = asked(begin("crm", VISIT))
    again = asked(reply(step.pending, "2026-12-03" + " " * elicitation.MAX_ANSWER))
    assert again.pending == step.pending
    assert "longer than" in say(again)[0][1]["reason"]


def test_a_malformed_slot_reads_as_nothing_pending() -> None:
    for raw in (
        None,
        "x",
        {},
        {"server": "s", "message": "m", "mode": "sql", "fields": [], "position": 0, "answers": {}},
    ):
        assert PendingElicitation.from_slot(raw) is None


def test_a_skipped_field_takes_its_default_and_the_question_says_so() -> None:
    """SEP-1034: a field's default is what a skipped (or, all at once, left out) field answers."""
    text = {"type": "string"}
    request = form(
        "Defaults",
        name={**text, "default": "John Doe"},
        age={"type": "integer", "default": 30},
        verified={"type": "boolean", "default": True},
        status={"type": "string", "enum": ["active", "inactive"], "default": "active"},
        broken={"type": "integer", "minimum": 1, "default": 0},  # a default its own schema refuses
    )
    step = asked(begin("crm", request))
    assert say(step)[0][1]["optional"] == " (say skip for John Doe)"
    for _ in range(4):
        step = asked(reply(through_the_tracker(step), "skip"))
    assert say(step)[0][1]["field"] == "broken" and say(step)[0][1]["optional"].startswith(" (optional")
    done = reply(step.pending, "skip")
    assert done == Replied("accept", {"name": "John Doe", "age": 30, "verified": True, "status": "active"}), (
        done
    )
    # all at once: a field left out takes its default
    short = form(
        "Short",
        verified={"type": "boolean", "default": False},
        status=request["requestedSchema"]["properties"]["status"],
    )
    step = asked(begin("crm", short))
    assert step.pending.all_at_once
    assert reply(step.pending, "status: inactive") == Replied(
        "accept", {"status": "inactive", "verified": False}
    )
