"""The chat page in a real browser, against the real stack over MCP tools.

One stack for the whole folder (the live proof's `ProofStack`: CRM REST over a fresh SQLite file,
the CRM MCP server with a token, the action server with every tool from MCP, one Rasa server with
the channels of credentials.yml: the signed socket.io channel and the REST channel with its bearer
token), plus the chat page server, all on free ports on 127.0.0.1. Rasa lets pages from two ports in:
the chat page's and a spare one for the page servers a test starts itself. Debian's Chromium
(/usr/bin/chromium, installed by `make setup`) runs headless under Python's Playwright; no browser
is downloaded. Each test gets a fresh browser context (so a fresh session cookie, sessionStorage and
conversation) and, when it fails, leaves a screenshot in test-results/browser/.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Dialog, Locator, Page, Playwright, expect, sync_playwright

from tests.live.proof.proof_stack import ProofStack
from tests.live.proof.store import StoreReader
from tests.support import procs

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = procs.REPO_ROOT / "test-results" / "browser"
# A turn can take a few seconds on a busy machine (NLU, action server, MCP, CRM); never a minute.
REPLY_TIMEOUT_MS = 30_000
STORE_KEY = "crm-assistant-chat"  # web/chat.js
# mcp_bridge.channels.socketio's (that module imports Rasa, which the tests' environment has not).
CLOCK_SKEW_SECONDS = 10
DEFAULT_AUDIENCE = "mcp_bridge.channels.socketio"
RENEW_EVENT = "renew_token"


@dataclass(frozen=True)
class ChatStack:
    store: StoreReader
    rasa_url: str
    page_url: str
    access: procs.RasaAccess
    # A port whose pages the Rasa server lets in too, for a page server a test starts (one at a time).
    spare_page_port: int
    audit_log: Path
    # The action server's /webhook and the token Rasa sends it (for the forged-request tests).
    action_url: str
    action_token: str

    def page_server(self, rasa_url: str, **options: Any) -> procs.ServiceProcess:
        """A chat page server on the spare port, talking to `rasa_url` (the Rasa server, or a proxy)."""
        return procs.chat_page(
            rasa_url=rasa_url, chat_key=self.access.chat_key, port=self.spare_page_port, **options
        )


@pytest.fixture(scope="package")
def chat_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatStack]:
    stack = ProofStack(tmp_path_factory.mktemp("chat-stack"))
    page_port, spare_port = procs.free_port(), procs.free_port()
    stack.allow_pages(page_port, spare_port)
    try:
        stack.start_backends()
        stack.start_rasa_in_background(stack.endpoints)
        stack.use_skills("mcp")  # every tool from the MCP server
        rasa_url = stack.wait_for_rasa()
        page = stack.services.start(
            procs.chat_page(rasa_url=rasa_url, chat_key=stack.access.chat_key, port=page_port)
        )
        audit = stack.workdir / "audit-mcp.jsonl"
        action_url = f"http://{procs.HOST}:{stack.action_port}/webhook"
        yield ChatStack(
            StoreReader(stack.db),
            rasa_url,
            page.url,
            stack.access,
            spare_port,
            audit,
            action_url,
            stack.action_token,
        )
    finally:
        stack.close()


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make setup` installs Debian's chromium (as root)")
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"report_{report.when}", report)  # read by the page fixture, for the screenshot
    return report


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A new page in a browser context of its own; a screenshot is kept if the test fails."""
    context = browser.new_context(viewport={"width": 900, "height": 760})
    page = context.new_page()
    try:
        yield page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / (re.sub(r"[^\w.-]+", "_", request.node.name) + ".png")
            try:
                page.screenshot(path=str(shot), full_page=True)
                print(f"screenshot of the failed page: {shot}")
            except Exception as exc:  # the page may be gone; the failure itself matters more
                print(f"no screenshot ({exc})")
        context.close()


@pytest.fixture
def dialogs(page: Page) -> list[str]:
    """The messages of every alert, confirm or prompt the page opens (each dismissed)."""
    seen: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        seen.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return seen


class ChatPage:
    """What a person does on the chat page, and what they see there."""

    def __init__(self, page: Page, url: str) -> None:
        self.page = page
        self.url = url

    def open(self) -> ChatPage:
        self.page.goto(self.url)
        self.expect_connected()
        return self

    def expect_connected(self) -> None:
        expect(self.page.locator("#status")).to_have_text("Connected", timeout=REPLY_TIMEOUT_MS)

    def say(self, text: str) -> None:
        self.page.fill("#message", text)
        self.page.click("#send")

    @property
    def bot_bubbles(self) -> Locator:
        return self.page.locator(".msg.bot .bubble")

    @property
    def user_bubbles(self) -> Locator:
        return self.page.locator(".msg.user .bubble")

    def expect_reply(self, text: str) -> None:
        """Waits until the assistant's latest message is exactly `text`."""
        expect(self.bot_bubbles.last).to_have_text(text, timeout=REPLY_TIMEOUT_MS)

    def question(self) -> Locator:
        """The latest assistant message that carries buttons."""
        return self.page.locator(".msg.bot:has(.buttons)").last

    def button(self, title: str) -> Locator:
        return self.question().get_by_role("button", name=title, exact=True)

    def start_note(self, email: str, note: str) -> None:
        """Asks to log a call, gives the note when asked, and waits for the confirmation question."""
        self.say(f"log a call with {email}")
        self.expect_reply("What should the note say?")
        self.say(note)

    def session_id(self) -> str:
        """The conversation the channel confirmed to the page (the id in its token)."""
        saved = json.loads(self.page.evaluate(f"sessionStorage.getItem({json.dumps(STORE_KEY)})"))
        return str(saved["conversationId"])


def tracker(chat_stack: ChatStack, conversation_id: str) -> dict[str, Any]:
    """The conversation's tracker (Rasa's HTTP API, with its token, read-only)."""
    query = urllib.parse.urlencode({"token": chat_stack.access.api_token})
    url = f"{chat_stack.rasa_url}/conversations/{urllib.parse.quote(conversation_id)}/tracker?{query}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return dict(json.loads(reply.read()))


def user_texts(chat_stack: ChatStack, conversation_id: str) -> list[str]:
    """What the conversation's tracker says the person sent."""
    events = tracker(chat_stack, conversation_id)["events"]
    return [str(event.get("text")) for event in events if event.get("event") == "user"]
