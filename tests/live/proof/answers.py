"""Checks 9-16: how the person answers the question, against the real stack.

Edits, redirects, a way out of the form, the Yes button, a thumbs-down, a new request and a lookup
while a question is pending, and a sample of the labelled answers in
tests/plugin/reading/confirmation_answers.yml (the ones the reader is unit-tested on), each in a
conversation of its own, counted in the store.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.live.proof.chat import ChatError
from tests.live.proof.phases import Context
from tests.live.proof.report import CheckResult, failed, passed
from tests.live.proof.store import StoredNote, describe

ANSWERS = Path(__file__).resolve().parents[2] / "plugin" / "reading" / "confirmation_answers.yml"
# At least 40 answers go through the live stack; every label is represented.
SAMPLE = {"yes": 10, "no": 10, "unclear": 18, "edit": 6}


class Chat:
    """One conversation: send a message, compare every reply with what the domain says."""

    def __init__(self, ctx: Context, label: str) -> None:
        self.ctx = ctx
        self.sender = f"proof-{ctx.runner.run_id}-{label}-{uuid.uuid4().hex[:6]}"
        self.mark = ctx.store.mark()
        self.problem: str | None = None

    def expect(self, says: str, *replies: str) -> bool:
        if self.problem is not None:
            return False
        try:
            heard = self.ctx.runner.chat.send(self.sender, says)
        except ChatError as exc:
            self.problem = f"said {says!r}: {exc}"
            return False
        if heard != list(replies):
            self.problem = f"said {says!r}, heard {heard!r}, expected {list(replies)!r}"
            return False
        return True

    def written(self) -> list[StoredNote]:
        return self.ctx.store.notes_after(self.mark)


def _contact(ctx: Context, email: str) -> tuple[int, str]:
    contact = ctx.store.contact(email)
    assert contact is not None, email
    return contact.contact_id, contact.name


def _question(ctx: Context, name: str, note: str) -> str:
    return ctx.responses.text("utter_confirm_note", contact_name=name, arg_text=note)


def _ask(ctx: Context, chat: Chat, email: str, note: str) -> bool:
    """ "log a call with <email>: <note>" up to the question."""
    _, name = _contact(ctx, email)
    return chat.expect(f"log a call with {email}: {note}", _question(ctx, name, note))


def _unique(text: str) -> str:
    return f"{text} [{uuid.uuid4().hex[:6]}]"


def edit_replaces_the_note(ctx: Context, tag: str) -> CheckResult:
    name = f"[{tag}] 9 an edit is saved with the new text only"
    email = ctx.book.p.contacts[0]
    contact_id, contact_name = _contact(ctx, email)
    old, new = _unique("Dana asked about the VAT rate"), _unique("moved renewal to 14 Jan")
    chat = Chat(ctx, "edit")
    _ask(ctx, chat, email, old)
    chat.expect(f"actually change it to: {new}", _question(ctx, contact_name, new))
    chat.expect("yes", ctx.responses.text("utter_note_saved", contact_name=contact_name))
    written = chat.written()
    if chat.problem or written != [StoredNote(contact_id, new)]:
        return failed(name, f"{chat.problem or ''}; {describe(written)}")
    return passed(name, "asked again quoting the new text; «yes» → 1 note, the new text; the old one nowhere")


def redirect_moves_the_note(ctx: Context, tag: str) -> CheckResult:
    name = f"[{tag}] 10 a redirect saves on that contact only"
    first, other = ctx.book.p.contacts[0], ctx.book.p.contacts[1]
    _, first_name = _contact(ctx, first)
    other_id, other_name = _contact(ctx, other)
    note = _unique("Wants the revised quote")
    chat = Chat(ctx, "redirect")
    _ask(ctx, chat, first, note)
    chat.expect(f"no, it's for {other}", _question(ctx, other_name, note))
    chat.expect("yes", ctx.responses.text("utter_note_saved", contact_name=other_name))
    written = chat.written()
    if chat.problem or written != [StoredNote(other_id, note)]:
        return failed(name, f"{chat.problem or ''}; {describe(written)}")
    return passed(name, f"{first_name} → «no, it's for {other}» → asked about {other_name}; saved there only")


def way_out_of_the_form(ctx: Context, tag: str) -> CheckResult:
    name = f"[{tag}] 11 cancel and help inside the form; nothing written"
    r = ctx.responses
    email = ctx.book.p.contacts[0]
    cancelled, nothing = r.text("utter_log_cancelled"), r.text("utter_nothing_pending")
    chats = []
    for way_out in ("cancel", "never mind", "stop", "forget it", "quit"):
        chat = Chat(ctx, "cancel")
        chat.expect("log a call", r.text("utter_ask_contact_email"))
        chat.expect(way_out, cancelled)
        chat.expect("yes", nothing)  # nothing was left pending
        chats.append(chat)
    at_note = Chat(ctx, "cancel-note")
    at_note.expect(f"log a call with {email}", r.text("utter_ask_note_text"))
    at_note.expect("help", r.text("utter_help"), r.text("utter_ask_note_text"))
    at_note.expect("cancel", cancelled)
    at_note.expect("yes", nothing)
    chats.append(at_note)
    helped = Chat(ctx, "help-email")
    helped.expect("log a call", r.text("utter_ask_contact_email"))
    helped.expect("help", r.text("utter_help"), r.text("utter_ask_contact_email"))
    chats.append(helped)
    for chat in chats:
        if chat.problem or chat.written():
            return failed(name, f"{chat.problem or ''}; {describe(chat.written())}")
    return passed(
        name,
        f"5 ways out at the address, 1 at the note: «{cancelled}», then «yes» → «{nothing}»; "
        "«help» answers and asks the same question again",
    )


def button_confirms(ctx: Context, tag: str) -> CheckResult:
    name = f"[{tag}] 12 the Yes button's payload confirms, once"
    email = ctx.book.p.contacts[2]
    contact_id, contact_name = _contact(ctx, email)
    note = _unique("Signed the renewal")
    chat = Chat(ctx, "button")
    _ask(ctx, chat, email, note)
    chat.expect("/affirm", ctx.responses.text("utter_note_saved", contact_name=contact_name))
    written = chat.written()
    if chat.problem or written != [StoredNote(contact_id, note)]:
        return failed(name, f"{chat.problem or ''}; {describe(written)}")
    return passed(name, "«/affirm» → saved, 1 note")


def thumbs_down_writes_nothing(ctx: Context, tag: str) -> CheckResult:
    name = f'[{tag}] 13 "👎" writes nothing'
    email = ctx.book.p.contacts[0]
    chat = Chat(ctx, "thumbs-down")
    _ask(ctx, chat, email, _unique("Do not keep this"))
    chat.expect("👎", ctx.responses.text("utter_note_cancelled"))
    if chat.problem or chat.written():
        return failed(name, f"{chat.problem or ''}; {describe(chat.written())}")
    return passed(name, f"«👎» → «{ctx.responses.text('utter_note_cancelled')}», no note")


def new_request_takes_its_own_values(ctx: Context, tag: str) -> CheckResult:
    name = f"[{tag}] 14 a new log while a question is pending: its own contact and note"
    first, other = ctx.book.p.contacts[0], ctx.book.p.contacts[1]
    other_id, other_name = _contact(ctx, other)
    old, new = _unique("First note"), _unique("Second note")
    chat = Chat(ctx, "new-request")
    _ask(ctx, chat, first, old)
    dropped = ctx.responses.text("utter_question_dropped")
    chat.expect(f"log a call with {other}: {new}", dropped, _question(ctx, other_name, new))
    chat.expect("yes", ctx.responses.text("utter_note_saved", contact_name=other_name))
    # And a new request without a note asks for one instead of taking the old one.
    bare = Chat(ctx, "new-request-bare")
    _ask(ctx, bare, first, _unique("Abandoned note"))
    bare.expect(f"log a call with {other}", ctx.responses.text("utter_ask_note_text"))
    bare.expect("cancel", ctx.responses.text("utter_log_cancelled"))
    written = chat.written()
    if chat.problem or bare.problem or written != [StoredNote(other_id, new)]:
        return failed(name, f"{chat.problem or bare.problem or ''}; {describe(written)}")
    return passed(
        name, f"«{dropped}», then asked about {other_name} and the new note; «yes» → that note only"
    )


def lookup_in_the_middle(ctx: Context, tag: str) -> CheckResult:
    name = f"[{tag}] 15 a lookup while a question is pending: answered, then asked again"
    r = ctx.responses
    first, other = ctx.book.p.contacts[0], ctx.book.p.contacts[1]
    first_id, first_name = _contact(ctx, first)
    other_contact = ctx.store.contact(other)
    assert other_contact is not None
    note = _unique("Asked about the Q3 renewal")
    chat = Chat(ctx, "lookup")
    _ask(ctx, chat, first, note)
    found = chat.ctx.runner.chat.send(chat.sender, f"who is {other}?") if chat.problem is None else []
    question = _question(ctx, first_name, note)
    # The lookup's answer (its text is the CRM's), then the same question again.
    if (
        len(found) != 3
        or other_contact.name not in found[0]
        or found[1:] != [r.text("utter_confirm_again"), question]
    ):
        chat.problem = chat.problem or f"said 'who is {other}?', heard {found!r}"
    chat.expect("yes", r.text("utter_note_saved", contact_name=first_name))
    written = chat.written()
    if chat.problem or written != [StoredNote(first_id, note)]:
        return failed(name, f"{chat.problem or ''}; {describe(written)}")
    return passed(name, f"«{found[0]}» then «{found[1]}» + the question; «yes» → saved once, on {first_name}")


def _sample() -> list[tuple[str, str]]:
    answers: dict[str, Any] = yaml.safe_load(ANSWERS.read_text(encoding="utf-8"))
    picked: list[tuple[str, str]] = []
    for label, count in SAMPLE.items():
        pool = [entry["answer"] if isinstance(entry, dict) else entry for entry in answers[label]]
        pool = [text for text in pool if text.strip() and "@" not in text]  # one conversation, one contact
        step = max(1, len(pool) // count)
        picked += [(text, label) for text in pool[::step][:count]]
    return picked


def answer_sample(ctx: Context, tag: str) -> CheckResult:
    """16. Labelled answers through the live stack: a write only for a yes (unsafe writes must be 0)."""
    sample = _sample()
    name = f"[{tag}] 16 {len(sample)} labelled answers live: unsafe writes 0"
    email = ctx.book.p.contacts[3]
    contact_id, contact_name = _contact(ctx, email)
    unsafe, missed, problems = [], [], []
    for text, label in sample:
        chat = Chat(ctx, "sample")
        note = _unique("Sample note")
        if not _ask(ctx, chat, email, note):
            problems.append(chat.problem)
            continue
        try:
            ctx.runner.chat.send(chat.sender, text)
        except ChatError as exc:
            problems.append(f"said {text!r}: {exc}")
        written = chat.written()
        if label != "yes" and written:
            unsafe.append(f"{label} {text!r}: {describe(written)}")
        if label == "yes" and written != [StoredNote(contact_id, note)]:
            missed.append(f"{text!r}: {describe(written)}")
    yes_total = sum(1 for _, label in sample if label == "yes")
    saw = (
        f"unsafe writes {len(unsafe)}; yes answers written {yes_total - len(missed)}/{yes_total} "
        f"(on {contact_name}); {len(sample) - yes_total} other answers, none written"
    )
    if unsafe or problems:
        return failed(name, f"{saw}; unsafe: {unsafe}; problems: {problems}")
    if missed:
        return failed(name, f"{saw}; yes not written: {missed}")
    return passed(name, saw)


def answer_checks(ctx: Context, tag: str, *, sample: bool) -> list[CheckResult]:
    results = [
        edit_replaces_the_note(ctx, tag),
        redirect_moves_the_note(ctx, tag),
        way_out_of_the_form(ctx, tag),
        button_confirms(ctx, tag),
        thumbs_down_writes_nothing(ctx, tag),
        new_request_takes_its_own_values(ctx, tag),
        lookup_in_the_middle(ctx, tag),
    ]
    if sample:
        results.append(answer_sample(ctx, tag))
    return results
