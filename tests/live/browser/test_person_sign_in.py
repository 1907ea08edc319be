"""Acting as the person, in a real browser: the chat page asks to sign in before it asks the question,
the person opens the link in a new tab, signs in on oidc-provider's page, lands on the action server's
"Signed in" page, and the question appears in the chat without re-typing; a click on Yes writes the
note as that person (the CRM stores the token's subject as its author).

Its own stack (tests/live/test_person_oauth_chat.py's): the crm server acts as the person, which the
folder's shared stack (a static token) does not.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Page, expect

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
    expect(sign_in.locator("#message")).to_have_text(
        "Signed in; go back to the chat.", timeout=REPLY_TIMEOUT_MS
    )
    assert sign_in.url.startswith(live["person"].redirect_uri)
    sign_in.close()

    # Back in the chat: the question came by itself (nothing re-typed), and Yes writes as Dana.
    expect(chat.question()).to_contain_text(note, timeout=REPLY_TIMEOUT_MS)
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 0
    chat.button("Yes").click()
    expect(chat.bot_bubbles.last).to_contain_text("Saved to Dana Whitfield", timeout=REPLY_TIMEOUT_MS)
    assert notes_for(live["db"], DANA_EMAIL).count(note) == 1
    assert authors_of(live["db"], note) == ["dana-agent"]  # stored as written by the person who signed in
