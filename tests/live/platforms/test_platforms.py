"""The platform connectors (mcp_bridge/channels/: Slack, Teams, Twilio SMS and WhatsApp, Telegram,
Messenger) in one real Rasa server, with the action server, the CRM's MCP server and the CRM.

Each platform's API is a loopback stand-in that receives the assistant's replies
(tests/live/platforms/standins.py; the connector is pointed at it by its base-URL setting), and each
person's requests are sent and signed as the platform sends and signs them, with test secrets
(tests/live/platforms/people.py). What must hold, on every platform (docs/channels/):

* a note asked about is saved once on the person's yes, typed or by the question's native button,
  and the audit names the person as the platform authenticated them; nothing is saved on no;
* a request sent again (the same event id) reaches no conversation a second time;
* a request whose proof is missing or does not hold (a bad signature, a token signed by another key,
  another audience, expired), an old one, one of another workspace, tenant, Page or number, and a
  press of a button sent to someone else is refused: nothing reaches a conversation, nothing is
  written, the Rasa server's log says why, and never what the request said.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.channels.proof import ChannelKeys, Vouched
from tests.live.platforms.people import (
    Delivery,
    MessengerPerson,
    Person,
    Platform,
    SlackPerson,
    TeamsPerson,
    TelegramPerson,
    TwilioPerson,
)
from tests.live.platforms.standins import (
    REPLY_SECONDS,
    BotConnectorAPI,
    GraphAPI,
    Sent,
    SlackAPI,
    TelegramAPI,
    TwilioAPI,
)
from tests.live.proof.proof_stack import ProofStack
from tests.live.proof.store import StoredNote, StoreReader
from tests.support import procs

CREDENTIALS = Path(__file__).with_name("credentials.yml")
PRO_INTERFACE = Path(__file__).with_name("pro_interface.py")
PRO_PYTHON = procs.REPO_ROOT / ".venv-pro" / "bin" / "python"
DANA = "dana@example.com"
ASKED = "What should the note say?"
SAVED = "Saved to Dana Whitfield's record."
CANCELLED = "OK, I won't save it. Nothing was written."
# The settings of credentials.yml.
TEAM, OTHER_TEAM = "T0TEAM0001", "T0OTHER999"
TENANT, OTHER_TENANT = "6f1d0c3e-2b7a-4c55-9d1e-0a5b7c3e9f01", "0b9c8d7e-1111-4222-8333-944455556666"
NUMBER, WHATSAPP = "+15550001111", "whatsapp:+15550001111"
TWILIO_WEBHOOK = "https://rasa.example.com/webhooks/twilio/webhook"
PAGE, OTHER_PAGE = "104000000000001", "104000000000999"


def question_for(note: str) -> str:
    return f'Save this to Dana Whitfield\'s record? "{note}"'


@dataclass
class Stack:
    rasa_url: str
    api_token: str
    store: StoreReader
    audit_log: Path
    rasa_log: Path
    platforms: dict[str, Platform]
    acme_secret: str
    # The same connectors in Rasa Pro 3.21's environment, registered by its own code (pro_interface.py).
    pro_url: str
    # A person per platform with a question open, for the refusals (made on first use).
    asked: dict[str, tuple[Person, Sent, str]] = field(default_factory=dict)

    def log_size(self) -> int:
        return self.rasa_log.stat().st_size

    def log_since(self, size: int) -> str:
        with self.rasa_log.open("rb") as log:
            log.seek(size)
            return log.read().decode("utf-8", "replace")

    def user_texts(self, conversation: str) -> list[str]:
        query = urllib.parse.urlencode({"token": self.api_token})
        url = f"{self.rasa_url}/conversations/{urllib.parse.quote(conversation, safe='')}/tracker?{query}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            events = json.loads(reply.read())["events"]
        return [str(event.get("text")) for event in events if event.get("event") == "user"]

    def settled(self, conversation: str, texts: list[str]) -> None:
        """Wait until the conversation's tracker holds exactly ``texts`` from the person: Rasa saves it
        when a turn ends, after the replies went out (and Slack's turns run after its answer)."""
        deadline = time.monotonic() + REPLY_SECONDS
        while self.user_texts(conversation) != texts and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.user_texts(conversation) == texts

    def audited(self, conversation: str, decision: str) -> list[dict[str, Any]]:
        entries = map(json.loads, self.audit_log.read_text().splitlines())
        return [e for e in entries if e.get("conversation") == conversation and e.get("decision") == decision]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    keys = {
        "slack_token": "xoxb-" + secrets.token_urlsafe(40),
        "signing_secret": secrets.token_hex(16),
        "app_id": "2d4f0c9a-5b6e-4f70-8a91-b2c3d4e5f607",
        "app_password": secrets.token_urlsafe(30),
        "account_sid": "AC" + secrets.token_hex(16),
        "auth_token": secrets.token_hex(16),
        "telegram_token": f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(26)}",
        "secret_token": secrets.token_urlsafe(32),
        "verify": secrets.token_urlsafe(32),
        "app_secret": secrets.token_hex(16),
        "page_token": "EAAG" + secrets.token_urlsafe(60),
        "acme": secrets.token_urlsafe(32),
    }
    apis = {
        "slack": SlackAPI(keys["slack_token"]),
        "teams": BotConnectorAPI(keys["app_id"], keys["app_password"]),
        "twilio": TwilioAPI(keys["account_sid"], keys["auth_token"]),
        "telegram": TelegramAPI(keys["telegram_token"]),
        "messenger": GraphAPI(keys["page_token"], keys["app_secret"]),
    }
    env = {
        "SLACK_BOT_TOKEN": keys["slack_token"],
        "SLACK_SIGNING_SECRET": keys["signing_secret"],
        "SLACK_API_URL": f"{apis['slack'].url}/api/",
        "MICROSOFT_APP_ID": keys["app_id"],
        "MICROSOFT_APP_PASSWORD": keys["app_password"],
        "BOT_CONNECTOR_URL": apis["teams"].url,
        "TWILIO_ACCOUNT_SID": keys["account_sid"],
        "TWILIO_AUTH_TOKEN": keys["auth_token"],
        "TWILIO_API_URL": apis["twilio"].url,
        "TELEGRAM_BOT_TOKEN": keys["telegram_token"],
        "TELEGRAM_SECRET_TOKEN": keys["secret_token"],
        "TELEGRAM_API_URL": apis["telegram"].url,
        "FACEBOOK_VERIFY_TOKEN": keys["verify"],
        "FACEBOOK_APP_SECRET": keys["app_secret"],
        "FACEBOOK_PAGE_ACCESS_TOKEN": keys["page_token"],
        "GRAPH_API_URL": apis["messenger"].url,
        "ACME_SIGNING_SECRET": keys["acme"],
    }
    proof = ProofStack(tmp_path_factory.mktemp("platforms"))
    try:
        proof.start_backends()
        proof.start_rasa_in_background(proof.endpoints, credentials=CREDENTIALS, extra_env=env)
        pro_port = procs.free_port()
        pro = proof.start_logged(
            procs.ServiceProcess(
                "rasa-pro-channels",
                [str(PRO_PYTHON), str(PRO_INTERFACE), str(CREDENTIALS), str(pro_port)],
                env=procs.child_env(
                    {
                        "PYTHONPATH": str(procs.REPO_ROOT),
                        "MCP_BRIDGE_CHANNEL_KEY": procs.TEST_CHANNEL_KEY,
                        **env,
                    }
                ),
                ready_url=f"http://{procs.HOST}:{pro_port}/heard",
                url=f"http://{procs.HOST}:{pro_port}",
                start_timeout=120,
            )
        )
        proof.use_skills("mcp")
        rasa_url = proof.wait_for_rasa()
        assert proof.rasa is not None

        def platform(name: str, secrets_of: dict[str, str]) -> Platform:
            path = {"teams": "botframework", "messenger": "facebook"}.get(name, name)
            return Platform(name, f"{rasa_url}/webhooks/{path}/webhook", apis[name], secrets_of)

        yield Stack(
            rasa_url,
            proof.access.api_token,
            StoreReader(proof.db),
            proof.workdir / "audit-mcp.jsonl",
            proof.rasa.log_path,
            {
                "slack": platform("slack", {"signing_secret": keys["signing_secret"]}),
                "teams": platform("teams", {}),
                "twilio": platform(
                    "twilio",
                    {
                        "account_sid": keys["account_sid"],
                        "auth_token": keys["auth_token"],
                        "webhook_url": TWILIO_WEBHOOK,
                    },
                ),
                "telegram": platform("telegram", {"secret_token": keys["secret_token"]}),
                "messenger": platform("messenger", {"app_secret": keys["app_secret"]}),
            },
            keys["acme"],
            pro.url,
        )
    finally:
        proof.close()
        for api in apis.values():
            api.close()


# -- the people ----------------------------------------------------------------------------------------


def uid(prefix: str, digits: int = 8) -> str:
    return prefix + secrets.token_hex(digits // 2).upper()


def somebody(stack: Stack, where: str, rasa_url: str | None = None) -> Person:
    """A new person on ``where`` (a platform, or Twilio's ``sms`` and ``whatsapp``), in a conversation
    of their own; their requests go to the Rasa server at ``rasa_url`` (by default the stack's)."""
    if rasa_url is not None:
        stack = dataclasses.replace(
            stack,
            platforms={
                name: dataclasses.replace(p, webhook=p.webhook.replace(stack.rasa_url, rasa_url))
                for name, p in stack.platforms.items()
            },
        )
    if where == "slack":
        return SlackPerson(stack.platforms["slack"], TEAM, uid("U"), uid("D"))
    if where == "teams":
        return TeamsPerson(
            stack.platforms["teams"], TENANT, str(uuid.uuid4()), f"a:1{secrets.token_urlsafe(60)}"
        )
    if where in ("sms", "whatsapp"):
        number = f"+1555{secrets.randbelow(10**7):07d}"
        prefix = "whatsapp:" if where == "whatsapp" else ""
        return TwilioPerson(stack.platforms["twilio"], prefix + number, WHATSAPP if prefix else NUMBER)
    if where == "telegram":
        return TelegramPerson(stack.platforms["telegram"], 10**8 + secrets.randbelow(10**8))
    if where == "messenger":
        return MessengerPerson(stack.platforms["messenger"], PAGE, str(10**15 + secrets.randbelow(10**15)))
    raise AssertionError(where)


def first_words(person: Person) -> str:
    # Slack marks an address up as a link in the text it sends; the connector reads it as text.
    address = f"<mailto:{DANA}|{DANA}>" if isinstance(person, SlackPerson) else DANA
    return f"log a call with {address}"


def ask(person: Person, note: str) -> Sent:
    """The person asks to log a call and gives the note; the question about it, as the platform got it."""
    assert person.say(first_words(person)).status < 300
    person.expect(ASKED)
    assert person.say(note).status < 300
    return person.expect(question_for(note))


def button(question: Sent, title: str) -> Any:
    (found,) = [b for b in question.buttons if b.title == title]
    return found


def note_of(stack: Stack, note: str) -> list[StoredNote]:
    contact = stack.store.contact(DANA)
    assert contact is not None
    return [StoredNote(contact.contact_id, note)]


def the_person(person: Person) -> str:
    """Who the audit must name: the person as the platform authenticated them."""
    if isinstance(person, SlackPerson):
        return f"slack:{person.user_team}/{person.user}"
    if isinstance(person, TeamsPerson):
        return f"botframework:{person.tenant}/{person.aad}"
    if isinstance(person, TwilioPerson):
        return f"twilio:{person.number}"
    if isinstance(person, TelegramPerson):
        return f"telegram:{person.user_id}"
    if isinstance(person, MessengerPerson):
        return f"facebook:{person.page_id}/{person.psid}"
    raise AssertionError(person)


PLATFORMS = ["slack", "teams", "whatsapp", "sms", "telegram", "messenger"]


# -- a yes, typed: saved once; sent again: dropped -------------------------------------------------


@pytest.mark.parametrize("where", PLATFORMS)
def test_a_typed_yes_saves_the_note_once_and_the_same_request_again_reaches_nothing(
    stack: Stack, where: str
) -> None:
    person = somebody(stack, where)
    note = f"Typed yes on {where} ({secrets.token_hex(3)})."
    mark = stack.store.mark()
    question = ask(person, note)
    if where == "sms":  # no buttons on SMS: the answers to type are written out
        assert (
            question.buttons == ()
            and 'Reply "no", "yes" or "yes, and don\'t ask again today".' in question.text
        )
    else:
        assert [b.title for b in question.buttons][:2] == ["No", "Yes"], question
    yes = person.say("yes")
    person.expect(SAVED)
    assert stack.store.notes_after(mark) == note_of(stack, note)
    assert [e["user"] for e in stack.audited(person.conversation, "confirmed")] == [the_person(person)]

    said = [f"log a call with {DANA}", note, "yes"]
    stack.settled(person.conversation, said)
    size = stack.log_size()
    again = yes.send()
    assert again.status < 300  # answered, so that the platform stops retrying, and dropped
    assert "was received before" in stack.log_since(size)
    assert stack.user_texts(person.conversation) == said
    assert stack.store.notes_after(mark) == note_of(stack, note)


# -- no: nothing written -----------------------------------------------------------------------------


@pytest.mark.parametrize("where", PLATFORMS)
def test_no_writes_nothing(stack: Stack, where: str) -> None:
    person = somebody(stack, where)
    note = f"Declined on {where} ({secrets.token_hex(3)})."
    mark = stack.store.mark()
    question = ask(person, note)
    if where == "sms":
        person.say("no")
    else:
        person.press(button(question, "No"))
    person.expect(CANCELLED)
    assert stack.store.notes_after(mark) == []
    assert stack.audited(person.conversation, "confirmed") == []


# -- requests that fail their check ------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """A request the connector must refuse, made for a person with a question open."""

    platform: str
    what: str
    send: Callable[[Stack, Person, Sent], tuple[Delivery, list[str]]]  # the request, and whose trackers
    status: int
    logged: str


def asked(stack: Stack, where: str) -> tuple[Person, Sent, str]:
    """The platform's person with a question open (asked once per module, on first use)."""
    if where not in stack.asked:
        person = somebody(stack, where)
        if where == "telegram":  # in a group, where others see the question and its buttons
            person = TelegramPerson(
                stack.platforms["telegram"], person.user_id, -(10**12) - secrets.randbelow(10**6)
            )  # type: ignore[attr-defined]
        note = f"Pressed yes on {where} ({secrets.token_hex(3)})."
        stack.asked[where] = (person, ask(person, note), note)
        stack.settled(person.conversation, [f"log a call with {DANA}", note])
    return stack.asked[where]


def own(person: Person) -> list[str]:
    return [person.conversation]


def slack_cases() -> list[Refusal]:
    def unsigned(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", signed=False), own(p)

    def other_secret(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", secret=secrets.token_hex(16)), own(p)

    def old(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", age=6 * 60), own(p)

    def again(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.sent[1].send(), own(p)  # the note, as the platform sent it

    def other_workspace(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", team=OTHER_TEAM), own(p)

    def person_of_another_workspace(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        assert isinstance(p, SlackPerson)
        guest = SlackPerson(stack.platforms["slack"], TEAM, p.user, p.channel, user_team=OTHER_TEAM)
        return guest.say("yes"), own(p)

    def someone_else_presses(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        assert isinstance(p, SlackPerson)
        other = SlackPerson(stack.platforms["slack"], TEAM, uid("U"), p.channel)  # in the same channel
        return other.press(button(q, "Yes")), own(p) + own(other)

    return [
        Refusal("slack", "no signature", unsigned, 401, "no X-Slack-Signature"),
        Refusal("slack", "another secret", other_secret, 401, "X-Slack-Signature that does not verify"),
        Refusal("slack", "six minutes old", old, 401, "outside the 300 s window"),
        Refusal("slack", "the same event again", again, 200, "was received before"),
        Refusal("slack", "another workspace", other_workspace, 403, "which is not in team_ids"),
        Refusal(
            "slack",
            "a person of another workspace",
            person_of_another_workspace,
            403,
            "a person of workspace",
        ),
        Refusal(
            "slack",
            "someone else presses yes",
            someone_else_presses,
            403,
            "a button press of a button not sent",
        ),
    ]


def teams_cases() -> list[Refusal]:
    def no_token(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", token=None), own(p)

    def other_key(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        assert isinstance(p, TeamsPerson)
        return p.say("yes", token=p.connector.token(p.connector.url, key=p.connector.other_key)), own(p)

    def other_audience(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", claims={"aud": "another-bot"}), own(p)

    def expired(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        now = int(time.time())
        return p.say("yes", claims={"nbf": now - 7200, "exp": now - 600}), own(p)

    def other_service(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", claims={"serviceurl": "https://smba.example.net/evil/"}), own(p)

    def other_tenant(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", tenant=OTHER_TENANT), own(p)

    def not_endorsed(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", channel_id="webchat"), own(p)

    def again(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.sent[1].send(), own(p)  # the note, as the platform sent it

    def someone_else_presses(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        assert isinstance(p, TeamsPerson)
        other = TeamsPerson(
            stack.platforms["teams"], TENANT, str(uuid.uuid4()), p.conversation_id
        )  # the same chat
        return other.press(button(q, "Yes")), own(p) + own(other)

    return [
        Refusal("teams", "no token", no_token, 401, "no Authorization: Bearer token"),
        Refusal("teams", "signed by another key", other_key, 401, "(InvalidSignatureError)"),
        Refusal("teams", "another audience", other_audience, 401, "(InvalidAudienceError)"),
        Refusal("teams", "expired", expired, 401, "(ExpiredSignatureError)"),
        Refusal("teams", "another serviceUrl", other_service, 401, "serviceurl claim is not the activity's"),
        Refusal(
            "teams", "a channel the key is not endorsed for", not_endorsed, 401, "not endorsed for channel"
        ),
        Refusal("teams", "another tenant", other_tenant, 403, "which is not in tenant_ids"),
        Refusal("teams", "the same activity again", again, 200, "was received before"),
        Refusal(
            "teams",
            "someone else presses yes",
            someone_else_presses,
            403,
            "a button press of a button not sent",
        ),
    ]


def twilio_cases() -> list[Refusal]:
    def unsigned(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", signed=False), own(p)

    def other_token(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", token=secrets.token_hex(16)), own(p)

    def other_url(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", url="https://evil.example.com/webhooks/twilio/webhook"), own(p)

    def other_number(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        assert isinstance(p, TwilioPerson)
        other = TwilioPerson(stack.platforms["twilio"], p.number, "whatsapp:+15550009999")
        return other.say("yes"), own(p) + own(other)

    def again(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.sent[1].send(), own(p)  # the note, as the platform sent it

    def someone_else_presses(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        other = somebody(stack, "whatsapp")
        return other.press(button(q, "Yes")), own(p) + own(other)

    return [
        Refusal("whatsapp", "no signature", unsigned, 401, "no X-Twilio-Signature"),
        Refusal(
            "whatsapp", "another auth token", other_token, 401, "X-Twilio-Signature that does not verify"
        ),
        Refusal(
            "whatsapp", "signed for another URL", other_url, 401, "X-Twilio-Signature that does not verify"
        ),
        Refusal("whatsapp", "to another number", other_number, 403, "which is not a twilio_number"),
        Refusal("whatsapp", "the same message again", again, 200, "was received before"),
        Refusal(
            "whatsapp",
            "someone else presses yes",
            someone_else_presses,
            403,
            "a button press of a button not sent",
        ),
    ]


def telegram_cases() -> list[Refusal]:
    def unsigned(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", signed=False), own(p)

    def other_secret(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", secret=secrets.token_urlsafe(32)), own(p)

    def old(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", age=6 * 60), own(p)

    def again(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.sent[1].send(), own(p)  # the note, as the platform sent it

    def another_member_presses(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        assert isinstance(p, TelegramPerson)
        member = TelegramPerson(stack.platforms["telegram"], 10**8 + secrets.randbelow(10**8), p.chat_id)
        return member.press(button(q, "Yes")), own(p) + own(member)

    def pressed_in_another_chat(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        assert isinstance(p, TelegramPerson)
        alone = TelegramPerson(
            stack.platforms["telegram"], p.user_id
        )  # the person's private chat with the bot
        return alone.press(button(q, "Yes")), own(p) + own(alone)

    return [
        Refusal("telegram", "no secret token", unsigned, 401, "no X-Telegram-Bot-Api-Secret-Token"),
        Refusal("telegram", "another secret token", other_secret, 401, "not the webhook's secret_token"),
        Refusal("telegram", "six minutes old", old, 200, "outside the 300 s window"),
        Refusal("telegram", "the same update again", again, 200, "was received before"),
        Refusal(
            "telegram",
            "another member presses yes",
            another_member_presses,
            403,
            "a button press of a button not sent",
        ),
        Refusal(
            "telegram",
            "pressed in another chat",
            pressed_in_another_chat,
            403,
            "a button press of a button not sent",
        ),
    ]


def messenger_cases() -> list[Refusal]:
    def unsigned(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", signed=False), own(p)

    def other_secret(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", secret=secrets.token_hex(16)), own(p)

    def other_page(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", page=OTHER_PAGE), own(p)

    def old(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.say("yes", age=6 * 60), own(p)

    def again(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        return p.sent[1].send(), own(p)  # the note, as the platform sent it

    def someone_else_presses(stack: Stack, p: Person, q: Sent) -> tuple[Delivery, list[str]]:
        other = somebody(stack, "messenger")
        return other.press(button(q, "Yes")), own(p) + own(other)

    return [
        Refusal("messenger", "no signature", unsigned, 401, "no X-Hub-Signature-256"),
        Refusal(
            "messenger", "another app secret", other_secret, 401, "X-Hub-Signature-256 that does not verify"
        ),
        Refusal("messenger", "another Page", other_page, 403, "not page_id"),
        Refusal("messenger", "six minutes old", old, 200, "outside the 300 s window"),
        Refusal("messenger", "the same message again", again, 200, "received before"),
        Refusal(
            "messenger",
            "someone else's quick reply",
            someone_else_presses,
            200,
            "a button press of a button not sent",
        ),
    ]


REFUSALS = slack_cases() + teams_cases() + twilio_cases() + telegram_cases() + messenger_cases()


@pytest.mark.parametrize("case", REFUSALS, ids=[f"{c.platform}: {c.what}" for c in REFUSALS])
def test_a_request_that_fails_its_check_reaches_no_conversation_and_the_log_says_why(
    stack: Stack, case: Refusal
) -> None:
    person, question, note = asked(stack, case.platform)
    mark = stack.store.mark()
    size = stack.log_size()
    before = {c: stack.user_texts(c) for c in own(person)}
    delivery, conversations = case.send(stack, person, question)
    assert delivery.status == case.status, case.what
    for conversation in conversations:
        assert stack.user_texts(conversation) == before.get(conversation, []), (
            f"{case.what} reached {conversation}"
        )
    logged = stack.log_since(size)
    assert case.logged in logged, logged[-2000:]
    assert note not in logged  # the log says why, never what a request held
    assert stack.store.notes_after(mark) == []


# -- a yes by button, after all that: saved once; pressed again: dropped -------------------------------


@pytest.mark.parametrize("where", ["slack", "teams", "whatsapp", "telegram", "messenger"])
def test_the_persons_own_button_yes_then_saves_the_note_once(stack: Stack, where: str) -> None:
    person, question, note = asked(stack, where)
    mark = stack.store.mark()
    press = person.press(button(question, "Yes"))
    assert press.status < 300
    person.expect(SAVED)
    assert stack.store.notes_after(mark) == note_of(stack, note)
    assert [e["user"] for e in stack.audited(person.conversation, "confirmed")] == [the_person(person)]

    said = [f"log a call with {DANA}", note, "/affirm"]
    stack.settled(person.conversation, said)
    size = stack.log_size()
    assert press.send().status < 300
    assert "received before" in stack.log_since(size)
    assert stack.user_texts(person.conversation) == said
    assert stack.store.notes_after(mark) == note_of(stack, note)


# -- a connector of your own, on the same helper -------------------------------------------------------


def acme(stack: Stack, event: dict[str, Any], secret: str | None = None) -> tuple[int, Any]:
    """An event as Acme Chat (tests/live/platforms/own_connector.py) posts and signs it."""
    body = json.dumps({"id": secrets.token_hex(6), "workspace": "W1", **event}).encode()
    stamp = str(int(time.time()))
    signature = hmac.new((secret or stack.acme_secret).encode(), stamp.encode() + b"." + body, hashlib.sha256)
    headers = {
        "Content-Type": "application/json",
        "X-Acme-Timestamp": stamp,
        "X-Acme-Signature": signature.hexdigest(),
    }
    request = urllib.request.Request(
        f"{stack.rasa_url}/webhooks/acme/webhook", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, None


def test_a_connector_of_your_own_on_the_plugins_helper_takes_part_the_same_way(stack: Stack) -> None:
    user, other = uid("u"), uid("u")
    note = f"Said on Acme Chat ({secrets.token_hex(3)})."
    mark = stack.store.mark()
    assert any(ASKED in m["text"] for m in acme(stack, {"user": user, "text": f"log a call with {DANA}"})[1])
    status, said = acme(stack, {"user": user, "text": note})
    (question,) = [m for m in said if m.get("buttons")]
    assert question["text"] == question_for(note)
    yes = [b["value"] for b in question["buttons"] if b["title"] == "Yes"][0]

    assert acme(stack, {"user": user, "text": "yes"}, secret=secrets.token_urlsafe(32))[0] == 401
    assert acme(stack, {"user": other, "button": yes})[0] == 403  # another person presses the Yes
    assert stack.user_texts(f"acme_W1_{other}") == []
    assert stack.store.notes_after(mark) == []

    status, said = acme(stack, {"user": user, "button": yes})
    assert status == 200 and [m["text"] for m in said] == [SAVED]
    assert stack.store.notes_after(mark) == note_of(stack, note)
    assert [e["user"] for e in stack.audited(f"acme_W1_{user}", "confirmed")] == [f"acme:W1/{user}"]


# -- Rasa Pro 3.21's channel interface ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["slack", "teams", "whatsapp", "telegram", "messenger"])
def test_rasa_pros_channel_code_serves_the_connectors_as_rasa_3_6_does(stack: Stack, where: str) -> None:
    """Rasa Pro's own code makes the connectors from the same credentials.yml and registers them on its
    Sanic 25 (tests/live/platforms/pro_interface.py; its server needs a licence, its channel code does
    not): a message and a button press reach its agent signed for the person, and the answer reaches
    the platform with native buttons; an unsigned request reaches nothing."""
    person = somebody(stack, where, rasa_url=stack.pro_url)
    assert person.say("hello").status < 300
    question = person.expect("Heard 'hello'. Save it?")
    assert [b.title for b in question.buttons] == ["No", "Yes"]
    assert person.press(button(question, "Yes")).status < 300
    person.expect("Heard '/affirm'. Save it?")
    unsigned = {"token": None} if where == "teams" else {"signed": False}
    assert person.say("yes", **unsigned).status == 401

    with urllib.request.urlopen(f"{stack.pro_url}/heard", timeout=10) as reply:
        heard = [m for m in json.loads(reply.read()) if m["sender_id"] == person.conversation]
    assert [m["text"] for m in heard] == ["hello", "/affirm"]
    keys = ChannelKeys.parse(procs.TEST_CHANNEL_KEY)
    for message in heard:
        checked = keys.check(message["metadata"], conversation=person.conversation, text=message["text"])
        assert isinstance(checked, Vouched) and checked.user == the_person(person), checked
