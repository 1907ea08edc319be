"""The chat page as a person uses it: headless Chromium, the real stack over MCP tools, the CRM store
read directly.

What must hold: a click on Yes writes the note once and the page says so; No writes nothing; a note
with markup is shown as text and stored verbatim; a double click sends one answer; a reload between
the question and the click confirms the same pending call, once; when the assistant cannot be
reached the page says so and sends nothing (nor later, when the connection is back); a question
about two calls shows a button per call, and "Only 1" writes only the first; the session cookie is
the page's own (`__Host-`, named for its port), and one planted in the browser by another page on
the host never becomes the person's conversation; a socket whose token expires is closed and the
page, having renewed it, stays connected.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.request
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

import jwt
from playwright.sync_api import Page, expect

from tests.live.browser.conftest import CLOCK_SKEW_SECONDS, REPLY_TIMEOUT_MS, ChatPage, ChatStack, user_texts
from tests.live.proof.store import StoredNote
from tests.support import procs
from tests.support.tcp_proxy import TcpProxy

DANA = "dana@example.com"
SAVED = "Saved to Dana Whitfield's record."
CANCELLED = "OK, I won't save it. Nothing was written."
NOTHING_PENDING = "There's nothing waiting for your confirmation right now."


def question_for(note: str) -> str:
    return f'Save this to Dana Whitfield\'s record? "{note}"'


def open_chat(page: Page, chat_stack: ChatStack) -> ChatPage:
    return ChatPage(page, chat_stack.page_url).open()


def ask(chat: ChatPage, note: str) -> None:
    """Log a call with Dana with `note`, and wait for the question with its Yes / No buttons."""
    chat.start_note(DANA, note)
    chat.expect_reply(question_for(note))
    expect(chat.button("Yes")).to_be_enabled()
    expect(chat.button("No")).to_be_enabled()


def dana(chat_stack: ChatStack) -> int:
    contact = chat_stack.store.contact(DANA)
    assert contact is not None
    return contact.contact_id


def test_yes_saves_the_note_once_and_the_page_says_so(page: Page, chat_stack: ChatStack) -> None:
    mark = chat_stack.store.mark()
    chat = open_chat(page, chat_stack)
    note = "Called about the VAT rate on invoice 4471 (browser, yes)."
    ask(chat, note)
    assert chat_stack.store.notes_after(mark) == []  # asked, not written

    chat.button("Yes").click()

    chat.expect_reply(SAVED)
    assert chat_stack.store.notes_after(mark) == [StoredNote(dana(chat_stack), note)]
    expect(chat.user_bubbles.last).to_have_text("Yes")  # the button's title, not its payload
    expect(chat.button("Yes")).to_be_disabled()
    expect(chat.button("No")).to_be_disabled()
    expect(chat.button("Yes")).to_have_class("chosen")


def test_no_writes_nothing(page: Page, chat_stack: ChatStack) -> None:
    mark = chat_stack.store.mark()
    chat = open_chat(page, chat_stack)
    ask(chat, "Wants a callback on Friday (browser, no).")

    chat.button("No").click()

    chat.expect_reply(CANCELLED)
    assert chat_stack.store.notes_after(mark) == []
    expect(chat.button("Yes")).to_be_disabled()
    expect(chat.button("No")).to_have_class("chosen")


def test_markup_in_a_note_is_shown_as_text_and_saved_verbatim(
    page: Page, chat_stack: ChatStack, dialogs: list[str]
) -> None:
    mark = chat_stack.store.mark()
    chat = open_chat(page, chat_stack)
    note = "<b>bold</b> <script>alert(1)</script>"
    ask(chat, note)  # the question's text, character for character, quotes and brackets included

    expect(chat.user_bubbles.last).to_have_text(note)
    expect(page.locator("#log b")).to_have_count(0)  # no element was made from the note
    expect(page.locator("#log script")).to_have_count(0)
    chat.button("Yes").click()
    chat.expect_reply(SAVED)

    assert chat_stack.store.notes_after(mark) == [StoredNote(dana(chat_stack), note)]
    assert dialogs == []  # alert(1) never ran


def test_a_double_click_on_yes_sends_one_answer_and_writes_one_note(
    page: Page, chat_stack: ChatStack
) -> None:
    mark = chat_stack.store.mark()
    chat = open_chat(page, chat_stack)
    note = "Agreed on the Q3 renewal (browser, double click)."
    ask(chat, note)

    chat.button("Yes").dblclick()

    chat.expect_reply(SAVED)
    # Anything a second click sent would be answered before this message (one conversation's
    # messages are handled in order), so once "help" is answered every answer has arrived.
    chat.say("help")
    expect(chat.bot_bubbles.last).to_contain_text("Here's what I can do", timeout=REPLY_TIMEOUT_MS)
    assert chat_stack.store.notes_after(mark) == [StoredNote(dana(chat_stack), note)]
    # The page, not only the executor's single-use confirmation, kept the second click from going out.
    assert user_texts(chat_stack, chat.session_id()).count("/affirm") == 1
    expect(chat.user_bubbles.filter(has_text="Yes")).to_have_count(1)
    expect(chat.bot_bubbles.filter(has_text=NOTHING_PENDING)).to_have_count(0)


def test_a_reload_between_question_and_click_confirms_the_same_call_once(
    page: Page, chat_stack: ChatStack
) -> None:
    mark = chat_stack.store.mark()
    chat = open_chat(page, chat_stack)
    note = "Asked for a quote on 40 seats (browser, reload)."
    ask(chat, note)
    session = chat.session_id()

    page.reload()

    chat.expect_connected()
    assert chat.session_id() == session  # the same conversation, not a new one
    chat.expect_reply(question_for(note))  # the transcript is back, with the open question
    chat.button("Yes").click()
    chat.expect_reply(SAVED)
    assert chat_stack.store.notes_after(mark) == [StoredNote(dana(chat_stack), note)]
    assert user_texts(chat_stack, session).count("/affirm") == 1


def test_an_edit_typed_instead_of_a_click_is_asked_about(page: Page, chat_stack: ChatStack) -> None:
    mark = chat_stack.store.mark()
    chat = open_chat(page, chat_stack)
    ask(chat, "Follow up next Tuesday (browser, before the edit).")
    edited = "Follow up next Wednesday instead (browser, after the edit)."

    chat.say(f"change it to: {edited}")

    chat.expect_reply(question_for(edited))
    assert chat_stack.store.notes_after(mark) == []  # an edit is a new question, not a yes
    expect(chat.question().get_by_role("button", name="Yes", exact=True)).to_be_enabled()
    # The first question's buttons were answered by the typed edit.
    expect(
        page.locator(".msg.bot:has(.buttons)").first.get_by_role("button", name="Yes", exact=True)
    ).to_be_disabled()
    chat.button("Yes").click()
    chat.expect_reply(SAVED)
    assert chat_stack.store.notes_after(mark) == [StoredNote(dana(chat_stack), edited)]


def test_the_page_says_when_the_assistant_cannot_be_reached_and_sends_nothing(
    page: Page, chat_stack: ChatStack, services: procs.Services
) -> None:
    """The connection to Rasa drops between the question and the click, then comes back.

    A Yes clicked while it is down is refused on the page and is not delivered when the connection
    returns; a Yes clicked after that saves the note once.
    """
    rasa_port = urlsplit(chat_stack.rasa_url).port
    assert rasa_port is not None
    proxy = TcpProxy(rasa_port).start()
    try:
        page_server = services.start(chat_stack.page_server(proxy.url()))
        mark = chat_stack.store.mark()
        chat = ChatPage(page, page_server.url).open()
        note = "Said no rush on the invoice (browser, connection lost)."
        ask(chat, note)

        proxy.stop()  # Rasa can no longer be reached from the page
        status = page.locator("#status")
        # "Lost the connection ...", then "Can't reach ..." while it retries.
        expect(status).to_have_class("status unreachable", timeout=REPLY_TIMEOUT_MS)
        chat.button("Yes").click()
        expect(page.locator("#notice")).to_contain_text("Not sent")
        expect(chat.button("Yes")).to_be_enabled()  # still open: it was not answered
        expect(chat.user_bubbles).to_have_count(2)  # the request and the note, no "Yes"
        expect(status).to_have_text("Can't reach the assistant. Retrying…", timeout=REPLY_TIMEOUT_MS)

        proxy = TcpProxy(rasa_port, port=proxy.port).start()  # back, on the same address
        chat.expect_connected()
        session = chat.session_id()
        assert user_texts(chat_stack, session).count("/affirm") == 0  # nothing came late
        assert chat_stack.store.notes_after(mark) == []
        chat.button("Yes").click()
        chat.expect_reply(SAVED)
        assert chat_stack.store.notes_after(mark) == [StoredNote(dana(chat_stack), note)]
        assert user_texts(chat_stack, session).count("/affirm") == 1
    finally:
        proxy.stop()


def test_a_page_whose_assistant_is_down_says_so(page: Page, services: procs.Services) -> None:
    nothing_there = f"http://{procs.HOST}:{procs.free_port()}"
    page_server = services.start(procs.chat_page(rasa_url=nothing_there, chat_key="k" * 43))
    page.goto(page_server.url)

    expect(page.locator("#status")).to_have_text("Can't reach the assistant. Retrying…", timeout=10_000)
    page.fill("#message", "log a call with dana@example.com")
    page.click("#send")
    expect(page.locator("#notice")).to_contain_text("Not sent")
    expect(page.locator("#log li")).to_have_count(0)


def test_the_page_says_when_the_assistant_is_slow_to_answer(
    page: Page, chat_stack: ChatStack, services: procs.Services
) -> None:
    rasa_port = urlsplit(chat_stack.rasa_url).port
    assert rasa_port is not None
    with TcpProxy(rasa_port) as proxy:
        page_server = services.start(chat_stack.page_server(proxy.url(), no_answer_seconds=1))
        chat = ChatPage(page, page_server.url).open()
        proxy.delay = 4.0  # every answer from Rasa now takes 4 s to arrive

        chat.say("help")

        notice = page.locator("#notice")
        expect(notice).to_have_text("No answer from the assistant after 1 s.", timeout=3_000)
        expect(chat.bot_bubbles.last).to_contain_text("Here's what I can do", timeout=REPLY_TIMEOUT_MS)
        expect(notice).to_be_hidden()  # the answer came: the notice goes


def test_a_list_of_calls_has_a_button_per_call_and_only_1_writes_only_the_first(
    page: Page, chat_stack: ChatStack
) -> None:
    mark = chat_stack.store.mark()
    chat = open_chat(page, chat_stack)
    note = "Agreed on the Q3 renewal (browser, two contacts)."
    chat.say(f"log a call with {DANA} and priya@example.com: {note}")
    expect(chat.question()).to_contain_text(f'1. Note on Dana Whitfield\'s record: "{note}"')
    expect(chat.question()).to_contain_text(f'2. Note on Priya Raman\'s record: "{note}"')
    for title in ("No to all", "Only 1", "Only 2", "Yes to all"):
        expect(chat.button(title)).to_be_enabled()
    assert chat_stack.store.notes_after(mark) == []  # asked, not written

    chat.button("Only 1").click()

    chat.expect_reply(f'Not done, as you said: 2. Note on Priya Raman\'s record: "{note}"')
    expect(chat.bot_bubbles.nth(-2)).to_have_text(SAVED)
    assert chat_stack.store.notes_after(mark) == [StoredNote(dana(chat_stack), note)]
    expect(chat.user_bubbles.last).to_have_text("Only 1")
    expect(chat.button("Yes to all")).to_be_disabled()
    expect(chat.button("Only 1")).to_have_class("chosen")


class CookieSetter:
    """Another web server on the loopback, as any local program may run: its page sets a cookie for
    127.0.0.1, which the browser then sends to every port of it, the chat page's included."""

    def __init__(self, set_cookie: str) -> None:
        header = set_cookie

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Set-Cookie", header)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"<p>nothing to see</p>")

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer((procs.HOST, 0), Handler)
        self.url = f"http://{procs.HOST}:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _attackers_session(page_url: str) -> tuple[str, str, str]:
    """A session the chat page issued to someone else (who asked as its script would): the cookie's
    name and value, and the conversation its token names."""
    origin = page_url.rstrip("/")
    answer = urllib.request.urlopen(
        urllib.request.Request(
            page_url + "session",
            data=b"{}",
            method="POST",
            headers={"Origin": origin, "Content-Type": "application/json"},
        ),
        timeout=10,
    )
    cookie = SimpleCookie(answer.headers["Set-Cookie"])
    [(name, morsel)] = cookie.items()
    proof = json.loads(answer.read())["proof"]
    asked = urllib.request.Request(
        page_url + "token",
        data=json.dumps({"proof": proof}).encode(),
        method="POST",
        headers={"Origin": origin, "Content-Type": "application/json", "Cookie": f"{name}={morsel.value}"},
    )
    with urllib.request.urlopen(asked, timeout=10) as reply:
        token = json.loads(reply.read())["token"]
    return name, morsel.value, str(jwt.decode(token, options={"verify_signature": False})["sub"])


def test_the_session_cookie_is_the_pages_own_and_a_planted_one_never_becomes_the_persons_conversation(
    page: Page, chat_stack: ChatStack
) -> None:
    """Session fixation: someone has the chat page issue them a session, and a page of theirs on
    another port of 127.0.0.1 plants its cookie in the person's browser. The chat page there has no
    proof for it: it starts a session of its own, which replaces the planted cookie, and the person's
    conversation is not the one the planter can read."""
    name, planted, theirs = _attackers_session(chat_stack.page_url)
    setter = CookieSetter(f"{name}={planted}; Path=/; Secure; HttpOnly; SameSite=Lax")
    try:
        page.goto(setter.url)
        assert [c["value"] for c in page.context.cookies() if c["name"] == name] == [planted]

        chat = open_chat(page, chat_stack)
        chat.say("help")
        expect(chat.bot_bubbles.last).to_contain_text("Here's what I can do", timeout=REPLY_TIMEOUT_MS)
    finally:
        setter.close()
    mine = chat.session_id()
    assert mine != theirs
    assert user_texts(chat_stack, mine) == ["help"]
    assert user_texts(chat_stack, theirs) == []  # nothing of the person's reached the planted session
    [cookie] = [c for c in page.context.cookies() if c["name"].startswith("__Host-chat_session")]
    port = urlsplit(chat_stack.page_url).port
    assert cookie["name"] == f"__Host-chat_session-{port}" and cookie["value"] != planted
    assert (cookie["httpOnly"], cookie["secure"], cookie["sameSite"], cookie["path"], cookie["expires"]) == (
        True,
        True,
        "Strict",
        "/",
        -1,  # ends with the browser session
    )
    assert page.evaluate("document.cookie") == ""  # no script reads it
    # A reload keeps the page's own session (and its conversation).
    page.reload()
    chat.expect_connected()
    assert chat.session_id() == mine


def test_the_page_renews_its_token_on_the_open_socket_and_stays_connected(
    page: Page, chat_stack: ChatStack, services: procs.Services
) -> None:
    """Tokens good for 2 s: the channel closes a socket 2 s (plus its 10 s of clock skew) after its
    token's expiry unless the page renews it; 14 s later the page has stayed connected on the same
    socket (its status never changed), and the conversation goes on."""
    page_server = services.start(chat_stack.page_server(chat_stack.rasa_url, token_seconds=2))
    chat = ChatPage(page, page_server.url).open()
    page.evaluate(
        "window.statuses = [];"
        "new MutationObserver(() => window.statuses.push(document.getElementById('status').textContent))"
        ".observe(document.getElementById('status'), {childList: true, characterData: true, subtree: true})"
    )
    page.wait_for_timeout(2_000 + CLOCK_SKEW_SECONDS * 1000 + 2_000)
    assert page.evaluate("window.statuses") == []
    chat.say("help")
    expect(chat.bot_bubbles.last).to_contain_text("Here's what I can do", timeout=REPLY_TIMEOUT_MS)
    assert user_texts(chat_stack, chat.session_id()) == ["help"]
