"""Acting as the person, in a real browser: the chat page asks to sign in before it asks the question,
the person opens the link in a new tab, signs in on oidc-provider's page, lands on the action server's
page that shows the account, clicks "Use this account", and the question appears in the chat without
re-typing; a click on Yes writes the note as that person (the CRM stores the token's subject as its
author). A second browser (another context: its own cookies) that opens the link, or the
authorization URL it leads to, and signs in there links nothing.

Its own stack (tests/live/test_person_oauth_chat.py's): the crm server acts as the person, which the
folder's shared stack (a static token) does not.
"""

from __future__ import annotations

import re
import sqlite3
import time
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


def test_sign_in_from_the_chat_page_then_yes_writes_the_note_as_that_person(
    page: Page, live: dict[str, Any]
) -> None:
    chat = ChatPage(page, live["page_url"]).open()
    note = f"Called about the VAT rate from the browser {time.time()}"
    chat.say(f"log a call with {DANA_EMAIL}: {note}")
    auth_host = urlparse(live["auth"].url).netloc
    prompt = chat.bot_bubbles.filter(has_text="sign in at")
    expect(prompt).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    text = prompt.inner_text()
    assert text.startswith(f"To write to the CRM as you, sign in at {auth_host} first: "), text
    link = re.search(r"(http://\S+)", text)
    assert link is not None
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0

    # A new tab, as a person opens a link: the authorization server's own login page.
    sign_in = page.context.new_page()
    sign_in.goto(link.group(1))
    assert urlparse(sign_in.url).netloc == auth_host
    sign_in.fill("input[name=login]", "dana-agent")
    sign_in.fill("input[name=password]", "any password")
    sign_in.click("button[type=submit]")
    expect(sign_in.locator("#account")).to_have_text("dana-agent", timeout=REPLY_TIMEOUT_MS)
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


def _tokens_stored(live: dict[str, Any]) -> int:
    with sqlite3.connect(live["tokens"]) as db:
        return int(db.execute("SELECT count(*) FROM mcp_tokens").fetchone()[0])


def test_a_sign_in_completed_in_another_browser_links_nothing(
    page: Page, browser: Browser, live: dict[str, Any]
) -> None:
    chat = ChatPage(page, live["page_url"]).open()
    note = f"Called about the VAT rate, signed in from the right browser {time.time()}"
    chat.say(f"log a call with {DANA_EMAIL}: {note}")
    prompt = chat.bot_bubbles.filter(has_text="sign in at")
    expect(prompt).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    link = re.search(r"(http://\S+)", prompt.inner_text())
    assert link is not None
    auth_host = urlparse(live["auth"].url).netloc
    stored = _tokens_stored(live)

    # The person opens the link: the action server binds the sign-in to this browser (a cookie) and
    # sends it on to the authorization server; the URL it was sent to is what could be forwarded.
    mine = page.context.new_page()
    landed = mine.goto(link.group(1))
    assert landed is not None and urlparse(mine.url).netloc == auth_host
    hops: list[str] = []
    request: Request | None = landed.request
    while request is not None:
        hops.append(request.url)
        request = request.redirected_from
    authorize = next(url for url in hops if url.startswith(f"{live['auth'].url}/auth?"))

    # Someone else's browser: the chat's link is spent, and the authorization URL, signed in there,
    # comes back to the action server without the cookie: refused, nothing stored.
    other = browser.new_context()
    try:
        theirs = other.new_page()
        theirs.goto(link.group(1))
        expect(theirs.locator("#message")).to_contain_text("opened already", timeout=REPLY_TIMEOUT_MS)
        theirs.goto(authorize)
        assert urlparse(theirs.url).netloc == auth_host
        theirs.fill("input[name=login]", "lee-agent")
        theirs.fill("input[name=password]", "any password")
        theirs.click("button[type=submit]")
        message = theirs.locator("#message")
        expect(message).to_contain_text("started in another browser", timeout=REPLY_TIMEOUT_MS)
        expect(message).to_contain_text("Nothing was stored.")
        assert theirs.url.startswith(live["person"].redirect_uri)
        expect(theirs.get_by_role("button", name="Use this account")).to_have_count(0)
    finally:
        other.close()
    assert _tokens_stored(live) == stored  # nobody's token went in
    page.wait_for_timeout(1000)  # were anything resumed, the question would come now
    expect(chat.question()).to_have_count(0)
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0

    # The person's own browser finishes the same sign-in: the account is shown, then used.
    mine.fill("input[name=login]", "dana-agent")
    mine.fill("input[name=password]", "any password")
    mine.click("button[type=submit]")
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
