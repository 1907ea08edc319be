"""The proof's phases: conversations over one set of skill files, and the two one-off checks."""

from __future__ import annotations

from dataclasses import dataclass

from tests.live.proof.checks import absent_not_found, asks_first, at_once, no_writes_nothing, yes_writes_once
from tests.live.proof.conversations import Responses, Script, ScriptBook, Turn
from tests.live.proof.proof_stack import ProofStack
from tests.live.proof.report import CheckResult, Report, failed, passed
from tests.live.proof.runner import Outcome, Runner
from tests.live.proof.store import StoredNote, StoreReader, describe

PARALLEL = 10


@dataclass
class Context:
    stack: ProofStack
    runner: Runner
    book: ScriptBook
    responses: Responses
    store: StoreReader
    report: Report


def conversations(ctx: Context, tag: str) -> list[Outcome]:
    """Checks 1-4 and 8 with the action server as it is now; returns the sequential outcomes."""
    book, runner, report = ctx.book, ctx.runner, ctx.report
    confirming = runner.play_all(book.confirming(), tag)
    denying = runner.play_all(book.denying(), tag)
    absent = runner.play_all(book.absent(), tag)
    report.add(asks_first(tag, confirming + denying))
    report.add(yes_writes_once(tag, confirming))
    report.add(no_writes_nothing(tag, denying, ctx.responses))
    report.add(absent_not_found(tag, absent))
    mark = ctx.store.mark()
    parallel = runner.play_at_once(book.parallel(PARALLEL, tag), tag)
    report.add(at_once(tag, parallel, ctx.store.notes_after(mark)))
    return confirming + denying + absent


def _one_off(ctx: Context, label: str, note: str) -> Script:
    """A conversation that stops at the question: the proof then says "yes" itself."""
    p = ctx.book.p
    return ctx.book.script(label, ctx.book.asked_indexes()[0], email=p.contacts[0], note=note, answer=None)


def _yes(ctx: Context) -> str:
    return ctx.book.p.yes[0]


def unresolvable_tool(ctx: Context) -> CheckResult:
    """6. A constrained tool resolving to neither a local function nor an MCP tool fails loudly on "yes"."""
    name = "6 tool resolving to neither fails loudly, writes nothing"
    actions = ctx.stack.use_skills("unresolvable")
    script = _one_off(ctx, "unresolvable", f"{ctx.book.p.notes[0]} (unresolvable tool)")
    outcome = ctx.runner.opening(script, "unresolvable")
    if not outcome.opening_ok:
        return failed(name, f"the question was not asked: {outcome.diverged}")
    refusal = ctx.responses.text("utter_tool_not_configured")
    said_ok = ctx.runner.say(outcome, Turn(_yes(ctx), refusal))
    written = ctx.store.notes_after(outcome.mark)
    refused = [line for line in actions.output().splitlines() if "REFUSED" in line]
    if not said_ok:
        return failed(name, f"{outcome.diverged}; {describe(written)}")
    if not refused or "add_timeline_note" not in refused[0]:
        return failed(
            name, f'heard "{refusal}" but the action server logged no REFUSED line for add_timeline_note'
        )
    if written:
        return failed(name, describe(written))
    logged = refused[0][refused[0].index("REFUSED") :].split(" (conversation")[0]
    return passed(name, f"asked first; «{_yes(ctx)}» → «{refusal}»; logged «{logged}»; no note written")


def mcp_outage(ctx: Context) -> CheckResult:
    """7. MCP server stopped: "yes" saves nothing and says so; back up: the next attempt saves."""
    name = "[mcp] 7 MCP server down: nothing saved; back: next saves"
    stack, runner, responses = ctx.stack, ctx.runner, ctx.responses
    assert stack.actions is not None and stack.actions.process is not None
    pid = stack.actions.process.pid
    down = runner.opening(_one_off(ctx, "mcp down", f"{ctx.book.p.notes[0]} (MCP server down)"), "mcp")
    if not down.opening_ok:
        return failed(name, f"the question was not asked: {down.diverged}")
    unavailable = responses.text("utter_tool_unavailable")
    stack.stop_mcp()
    try:
        said_ok = runner.say(down, Turn(_yes(ctx), unavailable))
        written_down = ctx.store.notes_after(down.mark)
    finally:
        stack.start_mcp()
    if not said_ok:
        return failed(name, f"MCP server down: {down.diverged}; {describe(written_down)}")
    if written_down:
        return failed(name, f"MCP server down: {describe(written_down)}")
    back_script = ctx.book.script(
        "mcp back",
        ctx.book.asked_indexes()[0],
        email=ctx.book.p.contacts[0],
        note=f"{ctx.book.p.notes[0]} (MCP server back)",
        answer=_yes(ctx),
    )
    back = runner.play(back_script, "mcp")
    assert back_script.contact is not None and back_script.answer is not None
    saved = back_script.answer.expect
    expected = [StoredNote(back_script.contact.contact_id, back_script.note)]
    if back.diverged is not None or back.written != expected:
        return failed(
            name, f"MCP server back: {back.diverged or 'heard ' + saved}; {describe(back.written or [])}"
        )
    if stack.actions.process is None or stack.actions.process.pid != pid:
        return failed(name, "the action server was restarted in between")
    return passed(
        name, f"down: «{unavailable}», no note; back up: «{saved}», 1 note; same action server process"
    )
