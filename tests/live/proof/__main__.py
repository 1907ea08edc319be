"""`python -m tests.live.proof` (`make proof`): the live end-to-end proof.

PROOF_ACTION_PYTHON runs the action server on another environment's interpreter (`make proof-pro`:
Rasa Pro's, .venv-pro); PROOF_ACTION_MCP then names the mcp release that environment must have.
PROOF_MANTLE ("mcp" or "local") has that phase run the Mantle twin of log_interaction
(examples/crm_bot/mantle/skills/log_interaction/: skill.md and its sidecar) in place of its YAML file,
so check 5 compares the twin's transcripts with the YAML file's, word for word (`make proof-sdk36`:
the twin over MCP tools; `make proof-pro`: over local tools).
Exit status 0 only when every check passes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from types import FrameType

from tests.live.proof.answers import answer_checks
from tests.live.proof.chat import RasaChat
from tests.live.proof.checks import identical_transcripts
from tests.live.proof.conversations import Responses, ScriptBook, load_phrasings
from tests.live.proof.phases import Context, conversations, mcp_outage, unresolvable_tool
from tests.live.proof.proof_stack import ProofStack
from tests.live.proof.report import CheckResult, Report, failed, passed
from tests.live.proof.runner import Runner
from tests.live.proof.store import StoreReader
from tests.live.proof.tool_checks import tool_checks
from tests.live.proof.tracing_checks import audit_checks, trace_checks

# What the action server's interpreter has, as that interpreter reads it.
ENVIRONMENT_PROBE = """
import importlib.metadata as m, platform, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return "-"
print(f"Python {platform.python_version()}, rasa-sdk {version('rasa-sdk')}, mcp {version('mcp')}, "
      f"rasa-pro {version('rasa-pro')} ({sys.prefix})")
"""


def action_environment(python: str, mcp_release: str | None) -> CheckResult:
    """The environment the action server runs in: it has what the proof needs (and, when asked, the mcp
    release named)."""
    name = "the action server's environment"
    probe = subprocess.run([python, "-c", ENVIRONMENT_PROBE], capture_output=True, text=True, timeout=60)
    saw = probe.stdout.strip() or probe.stderr.strip()[-300:]
    if probe.returncode != 0 or ", rasa-sdk -," in saw:
        return failed(name, saw)
    if mcp_release and f", mcp {mcp_release}" not in saw:
        return failed(name, f"{saw}; expected mcp {mcp_release}")
    return passed(name, saw)


def skill_loaded(stack: ProofStack, phase: str) -> CheckResult:
    """The action server of ``phase`` serves log_interaction from the file that phase says."""
    name = f"[{phase}] log_interaction served from its {stack.skill_format(phase)} file"
    assert stack.actions is not None
    expected = (
        "log_interaction/skill.md" if stack.skill_format(phase) == "skill.md" else "log_interaction.yml"
    )
    loaded = [line for line in stack.actions.output().splitlines() if "skill log_interaction (" in line]
    if not loaded or not loaded[-1].split(" from ", 1)[-1].split(":", 1)[0].endswith(expected):
        return failed(name, loaded[-1] if loaded else "the action server logged no skill log_interaction")
    return passed(name, loaded[-1][loaded[-1].index("skill log_interaction") :][:200])


def run(stack: ProofStack, report: Report) -> None:
    phrasings = load_phrasings()
    responses = Responses()
    report.add(action_environment(stack.action_python or sys.executable, os.environ.get("PROOF_ACTION_MCP")))
    report.section("starting the CRM REST API, the CRM MCP server and the Rasa server on 127.0.0.1")
    stack.start_backends()
    stack.start_rasa_in_background(stack.endpoints)
    stack.start_traces()  # while Rasa loads
    store = StoreReader(stack.db)

    report.section("CRM tools over MCP (raw mcp SDK client)")
    for result in asyncio.run(
        tool_checks(
            stack.mcp_url, stack.access_token(), store, phrasings.contacts[0], phrasings.absent_contacts[0]
        )
    ):
        report.add(result)

    stack.use_skills("mcp")  # starts while Rasa is still loading
    chat = RasaChat(stack.wait_for_rasa(), stack.access)
    contacts = {email: store.contact(email) for email in (*phrasings.contacts, *phrasings.absent_contacts)}
    book = ScriptBook(phrasings, responses, contacts)
    ctx = Context(stack, Runner(chat, store, uuid.uuid4().hex[:8]), book, responses, store, report)

    report.section(
        f"conversations, MCP tools (every tool-source line `mcp:crm`; log_interaction's "
        f"{stack.skill_format('mcp')} file)"
    )
    report.add(skill_loaded(stack, "mcp"))
    over_mcp = conversations(ctx, "mcp")
    report.add(mcp_outage(ctx))
    report.section("answering the question: edits, redirects, ways out, buttons, interruptions (MCP tools)")
    for result in answer_checks(ctx, "mcp", sample=True):
        report.add(result)

    stack.use_skills("local")
    report.section(
        "the same conversations, local tools (the same skills, tool-source lines `local`; log_interaction's "
        f"{stack.skill_format('local')} file)"
    )
    report.add(skill_loaded(stack, "local"))
    over_local = conversations(ctx, "local")
    report.add(
        identical_transcripts(
            (f"MCP ({stack.skill_format('mcp')})", over_mcp),
            (f"local ({stack.skill_format('local')})", over_local),
        )
    )
    if os.environ.get("PROOF_TRANSCRIPTS"):
        # Every conversation's words, to compare two builds word for word (a change that should not
        # change behaviour: run the proof before and after, and diff the two files).
        said = {
            tag: {outcome.script.label: outcome.transcript for outcome in outcomes}
            for tag, outcomes in (("mcp", over_mcp), ("local", over_local))
        }
        Path(os.environ["PROOF_TRANSCRIPTS"]).write_text(json.dumps(said, indent=1, ensure_ascii=False))
    report.section("answering the question, local tools")
    for result in answer_checks(ctx, "local", sample=False):
        report.add(result)

    report.section("a constrained tool imported from an MCP server that does not serve it")
    report.add(unresolvable_tool(ctx))

    report.section("what an operator sees: a confirmed MCP write's trace, the audit trail's chain")
    started = time.monotonic()
    for result in trace_checks(stack, over_mcp, phrasings):
        report.add(result)
    for result in audit_checks(stack):
        report.add(result)
    report.section(f"  (these checks took {time.monotonic() - started:.1f} s)")


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def main() -> int:
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _terminate)
    workdir = Path(tempfile.mkdtemp(prefix="crm-proof-"))
    report = Report()
    mantle = os.environ.get("PROOF_MANTLE") or None
    if mantle not in (None, "mcp", "local"):
        print(f"PROOF_MANTLE must be mcp or local, not {mantle!r}", file=sys.stderr)
        return 2
    stack = ProofStack(workdir, os.environ.get("PROOF_ACTION_PYTHON") or None, mantle)
    interrupted = False
    try:
        run(stack, report)
    except KeyboardInterrupt:
        interrupted = True
        report.add(failed("the proof ran to the end", "interrupted"))
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        report.add(failed("the proof ran to the end", f"{type(exc).__name__}: {exc}"))
    finally:
        stack.close()
    elapsed = _duration(time.monotonic() - started)
    failures = len(report.failures)
    if failures or interrupted:
        print(
            f"{len(report.results)} checks, {failures} failed, in {elapsed}; logs and store kept in {workdir}"
        )
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"{len(report.results)} checks, all passed, in {elapsed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
