"""Acting as the person, in a real browser: the chat page asks to sign in before it asks the question,
showing a link and a code; the person opens the link in a new tab, where the action server's page
says whose chat the sign-in serves and asks for the code; they type it, sign in on oidc-provider's
page, land on the action server's page that shows the account and whom it serves, click "Use this
account", and the question appears in the chat without re-typing; a click on Yes writes the note as
that person (the CRM stores the token's subject as its author). Someone else who opens the link (a
browser of their own) and has not the chat's code gets no further, nor does the authorization URL
signed in there; a link fetched first by a previewer still works for the person; the chat says which
account it writes as, and signs out.

Its own stack (tests/live/test_person_oauth_chat.py's): the crm server acts as the person, which the
folder's shared stack (a static token) does not.
"""

from __future__ import annotations

import re
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, Request, expect

from tests.live.browser.conftest import REPLY_TIMEOUT_MS, ChatPage
from tests.live.test_person_oauth_chat import person_stack
from tests.support import procs
from tests.support.conversation import notes_for
from tests.support.crm_db import authors_of

DANA_EMAIL = "dana@example.com"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with person_stack(tmp_path_factory.mktemp("person-browser"), page_port=procs.free_port()) as started:
        yield started


def _asked_to_sign_in(chat: ChatPage, live: dict[str, Any], note: str) -> tuple[str, str]:
    """Asks for a note for Dana; the chat asks to sign in first: the link it shows, and the code."""
    chat.say(f"log a call with {DANA_EMAIL}: {note}")
    auth_host = urlparse(live["auth"].url).netloc
    prompt = chat.bot_bubbles.filter(has_text="sign in at")
    expect(prompt).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    text = prompt.inner_text()
    assert text.startswith(f"To write to the CRM as you, sign in at {auth_host} first: "), text
    link = re.search(r"(http://\S+)", text)
    shown = chat.bot_bubbles.filter(has_text="will ask for this code")
    expect(shown).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    code = re.search(r"code: ([A-Z2-9]{3}-[A-Z2-9]{3})", shown.inner_text())
    assert link is not None and code is not None
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0
    return link.group(1), code.group(1)


def _page_says_whose(page: Page, chat: ChatPage, live: dict[str, Any]) -> None:
    """The link's page: whom the sign-in serves (the chat's identity) and where, and a code to type."""
    expect(page.locator("#who")).to_have_text(f"{chat.session_id()} (socketio)")
    expect(page.locator("#message")).to_contain_text(f"sign in at {urlparse(live['auth'].url).netloc}")
    expect(page.locator("#message")).to_contain_text("log interaction")
    assert page.url.startswith(live["person"].redirect_uri)


def _enter_code(page: Page, code: str) -> None:
    page.fill("#code", code)
    page.get_by_role("button", name=re.compile("^Continue to ")).click()


def _sign_in_at_the_authorization_server(page: Page, account: str) -> None:
    page.fill("input[name=login]", account)
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")


def test_sign_in_from_the_chat_page_then_yes_writes_the_note_as_that_person(
    page: Page, live: dict[str, Any]
) -> None:
    chat = ChatPage(page, live["page_url"]).open()
    note = f"Called about the VAT rate from the browser {time.time()}"
    link, code = _asked_to_sign_in(chat, live, note)

    # A new tab, as a person opens a link: the action server's page, then the authorization server's.
    sign_in = page.context.new_page()
    sign_in.goto(link)
    _page_says_whose(sign_in, chat, live)
    _enter_code(sign_in, code.lower().replace("-", " "))  # as a person may type it
    assert urlparse(sign_in.url).netloc == urlparse(live["auth"].url).netloc
    _sign_in_at_the_authorization_server(sign_in, "dana-agent")
    expect(sign_in.locator("#account")).to_have_text("dana-agent", timeout=REPLY_TIMEOUT_MS)
    expect(sign_in.locator("#who")).to_have_text(f"{chat.session_id()} (socketio)")
    assert sign_in.url.startswith(live["person"].redirect_uri)
    sign_in.get_by_role("button", name="Use this account").click()
    expect(sign_in.locator("#message")).to_have_text(
        "Signed in; go back to the chat.", timeout=REPLY_TIMEOUT_MS
    )
    sign_in.close()

    # Back in the chat: the question came by itself (nothing re-typed), and Yes writes as Dana.
    expect(chat.question()).to_contain_text(note, timeout=REPLY_TIMEOUT_MS)
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0
    chat.button("Yes").click()
    expect(chat.bot_bubbles.last).to_contain_text("Saved to Dana Whitfield", timeout=REPLY_TIMEOUT_MS)
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 1
    assert authors_of(live["db"], note) == ["dana-agent"]  # stored as written by the person who signed in

    # The chat says which account it writes as, and signs out.
    chat.say("which CRM account are you using?")
    expect(chat.bot_bubbles.last).to_contain_text("crm as dana-agent", timeout=REPLY_TIMEOUT_MS)
    chat.say("sign me out of the CRM")
    expect(chat.bot_bubbles.last).to_contain_text("forgotten your CRM sign-in", timeout=REPLY_TIMEOUT_MS)
    chat.say("which CRM account are you using?")
    expect(chat.bot_bubbles.last).to_contain_text("not signed in to the CRM", timeout=REPLY_TIMEOUT_MS)


def _tokens_stored(live: dict[str, Any]) -> int:
    with sqlite3.connect(live["tokens"]) as db:
        return int(db.execute("SELECT count(*) FROM mcp_tokens").fetchone()[0])


def test_a_sign_in_opened_by_another_person_links_nothing(
    page: Page, browser: Browser, live: dict[str, Any]
) -> None:
    """Someone else (a browser of their own) opens the link of the person's chat: the page says whose
    chat it serves and asks for the code, which only that chat shows; without it they get no further.
    Nor does the authorization URL the person's browser was sent to, signed in there: it comes back
    without the person's cookie. The person's own browser then finishes the same sign-in."""
    chat = ChatPage(page, live["page_url"]).open()
    note = f"Called about the VAT rate, signed in from the right browser {time.time()}"
    link, code = _asked_to_sign_in(chat, live, note)
    auth_host = urlparse(live["auth"].url).netloc
    stored = _tokens_stored(live)

    other = browser.new_context()
    try:
        # Lured to the link: the page names the other chat, and no code of theirs opens it.
        theirs = other.new_page()
        theirs.goto(link)
        _page_says_whose(theirs, chat, live)
        wrong = "ABC-DEF" if code != "ABC-DEF" else "DEF-ABC"
        _enter_code(theirs, wrong)
        expect(theirs.locator("#message")).to_contain_text("not the code the chat showed")
        assert theirs.url.startswith(live["person"].redirect_uri)
        assert not [c for c in other.cookies() if c["name"].endswith("mcp_bridge_sign_in")]  # not bound

        # The person opens the link and sends the code: the action server binds the sign-in to this
        # browser (a cookie) and sends it on; the URL it was sent to is what could be forwarded.
        mine = page.context.new_page()
        mine.goto(link)
        with mine.expect_navigation(url=re.compile(re.escape(live["auth"].url))) as sent:
            _enter_code(mine, code)
        landed = sent.value
        assert landed is not None and urlparse(mine.url).netloc == auth_host
        hops: list[str] = []
        request: Request | None = landed.request
        while request is not None:
            hops.append(request.url)
            request = request.redirected_from
        authorize = next(url for url in hops if url.startswith(f"{live['auth'].url}/auth?"))

        # Signed in at the authorization URL in the other browser: refused, nothing stored; and the
        # link itself is spent now.
        theirs.goto(authorize)
        assert urlparse(theirs.url).netloc == auth_host
        _sign_in_at_the_authorization_server(theirs, "lee-agent")
        message = theirs.locator("#message")
        expect(message).to_contain_text("started in another browser", timeout=REPLY_TIMEOUT_MS)
        expect(message).to_contain_text("Nothing was stored.")
        assert theirs.url.startswith(live["person"].redirect_uri)
        expect(theirs.get_by_role("button", name="Use this account")).to_have_count(0)
        theirs.goto(link)
        _enter_code(theirs, code)  # even with the code, now that the person has used the link
        expect(theirs.locator("#message")).to_contain_text("used already")
    finally:
        other.close()
    assert _tokens_stored(live) == stored  # nobody's token went in
    page.wait_for_timeout(1000)  # were anything resumed, the question would come now
    expect(chat.question()).to_have_count(0)
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0

    # The person's own browser finishes the same sign-in: the account is shown, then used.
    _sign_in_at_the_authorization_server(mine, "dana-agent")
    expect(mine.locator("#account")).to_have_text("dana-agent", timeout=REPLY_TIMEOUT_MS)
    assert _tokens_stored(live) == stored  # not before the person chose
    mine.get_by_role("button", name="Use this account").click()
    expect(mine.locator("#message")).to_have_text("Signed in; go back to the chat.", timeout=REPLY_TIMEOUT_MS)
    mine.close()
    assert _tokens_stored(live) == stored + 1

    expect(chat.question()).to_contain_text(note, timeout=REPLY_TIMEOUT_MS)
    chat.button("Yes").click()
    expect(chat.bot_bubbles.last).to_contain_text("Saved to Dana Whitfield", timeout=REPLY_TIMEOUT_MS)
    assert authors_of(live["db"], note) == ["dana-agent"]


def test_a_link_fetched_first_by_a_previewer_still_works_for_the_person(
    page: Page, live: dict[str, Any]
) -> None:
    """A link previewer (or a mail scanner) fetches the chat's link before the person clicks it, twice:
    it gets the page, and takes nothing; the person then opens it and signs in as usual."""
    chat = ChatPage(page, live["page_url"]).open()
    note = f"Called about the VAT rate, the link previewed first {time.time()}"
    link, code = _asked_to_sign_in(chat, live, note)
    stored = _tokens_stored(live)
    for _ in range(2):
        preview = urllib.request.Request(link, headers={"User-Agent": "Slackbot-LinkExpanding 1.0"})
        with urllib.request.urlopen(preview, timeout=30) as fetched:
            body = fetched.read().decode()
        assert fetched.status == 200 and "name=code" in body
        assert "Set-Cookie" not in fetched.headers  # nothing bound to the previewer
    assert _tokens_stored(live) == stored

    sign_in = page.context.new_page()
    sign_in.goto(link)
    _enter_code(sign_in, code)
    _sign_in_at_the_authorization_server(sign_in, "dana-agent")
    expect(sign_in.locator("#account")).to_have_text("dana-agent", timeout=REPLY_TIMEOUT_MS)
    sign_in.get_by_role("button", name="Use this account").click()
    expect(sign_in.locator("#message")).to_have_text(
        "Signed in; go back to the chat.", timeout=REPLY_TIMEOUT_MS
    )
    sign_in.close()
    assert _tokens_stored(live) == stored + 1
    expect(chat.question()).to_contain_text(note, timeout=REPLY_TIMEOUT_MS)
