"""The proof's checks of what an operator sees: the trace of a confirmed MCP write in the trace backend
(Arize Phoenix, on loopback, fed by OTLP over gRPC as a Collector or Jaeger would be), and the audit
trail's chain under `mcp-bridge audit verify`.

Rasa 3.6 emits no spans and sends no ``traceparent`` to the action server (its source has no
tracing; Rasa Pro's does): each action call starts a trace at rasa-sdk's ``create_app.webhook`` span,
which this checks too. So the answering turn's trace holds rasa-sdk's spans, the plugin's (the skill's
run, the answer, the gate, the tool call), the MCP SDK's client span (mcp 2.x) and the CRM MCP server's
span, joined through ``_meta``; the question's span is in the trace of the turn that asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.live.proof.conversations import Phrasings
from tests.live.proof.proof_stack import ProofStack
from tests.live.proof.report import CheckResult, failed, passed
from tests.live.proof.runner import Outcome

WRITE = "add_timeline_note"
# How long the backend may take to show spans the processes exported (rasa-sdk batches every 5 s).
SETTLE_SECONDS = 30.0

Span = dict[str, Any]


def spans(backend: str) -> list[Span]:
    """Every span the backend holds (its REST API, page by page)."""
    found: list[Span] = []
    cursor = ""
    while True:
        url = f"{backend}/v1/projects/default/spans?limit=1000" + (f"&cursor={cursor}" if cursor else "")
        with urllib.request.urlopen(url, timeout=30) as response:
            page = json.load(response)
        found += page.get("data") or []
        cursor = page.get("next_cursor") or ""
        if not cursor:
            return found


def _traces(found: list[Span]) -> dict[str, list[Span]]:
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in found:
        by_trace[span["context"]["trace_id"]].append(span)
    return by_trace


def _named(trace: list[Span], name: str, **attributes: Any) -> list[Span]:
    return [
        span
        for span in trace
        if span["name"] == name and all(span["attributes"].get(k) == v for k, v in attributes.items())
    ]


def _turns_of(by_trace: dict[str, list[Span]], sender: str) -> list[list[Span]]:
    """The traces of one conversation: those where rasa-sdk names its sender (on its webhook span; also
    on its action span from 3.21.1 on)."""
    return [t for t in by_trace.values() if any(s["attributes"].get("sender_id") == sender for s in t)]


def _mcp_major(stack: ProofStack) -> int:
    python = stack.action_python or sys.executable
    probe = "import importlib.metadata as m; print(m.version('mcp').split('.')[0])"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    return int(out.stdout.strip() or 0)


def trace_checks(stack: ProofStack, confirmed: list[Outcome], phrasings: Phrasings) -> list[CheckResult]:
    if not stack.tracing:
        return [
            passed(
                "tracing off where rasa-sdk has none: no backend, no exporter",
                "this rasa-sdk has no rasa_sdk.tracing; the plugin's spans are off (nothing to export)",
            )
        ]
    assert stack.traces is not None
    outcome = next(o for o in confirmed if o.script.confirms and o.diverged is None)
    expected = [
        "create_app.webhook",
        "ActionExecutor.run",
        "mcp-bridge skill_run",
        "mcp-bridge answer",
        "mcp-bridge gate",
        "mcp-bridge tool_call",
        f"tools/call {WRITE}",
    ]
    if _mcp_major(stack) >= 2:  # mcp 1.30 (Rasa Pro's environment) makes no client spans
        expected.insert(-1, f"MCP send tools/call {WRITE}")
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        found = spans(stack.traces.url)
        by_trace = _traces(found)
        turns = _turns_of(by_trace, outcome.sender)
        answering = [t for t in turns if _named(t, "mcp-bridge tool_call", **{"mcp_bridge.tool": WRITE})]
        names = {s["name"] for s in answering[0]} if answering else set()
        if answering and all(name in names for name in expected) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    results = [_answering_trace(outcome, answering, expected), _asking_trace(turns, answering)]
    results.append(_no_values(found, confirmed, phrasings))
    picture = os.environ.get("PROOF_TRACE_SCREENSHOT")
    if picture and len(answering) == 1:
        trace_id = answering[0][0]["context"]["trace_id"]
        results.append(screenshot(stack.traces.url, trace_id, Path(picture)))
    return results


def screenshot(backend: str, trace_id: str, picture: Path) -> CheckResult:
    """The trace in the backend's web UI, its tool call's span opened, in headless Chromium (Debian's,
    driven by Playwright as the browser tests drive it): the docs' tracing page shows it."""
    from playwright.sync_api import sync_playwright

    from tests.live.browser.conftest import CHROMIUM, CHROMIUM_ARGS

    name = "the trace in the backend's UI, as a picture"
    with urllib.request.urlopen(f"{backend}/v1/projects", timeout=30) as response:
        [project] = [p["id"] for p in json.load(response)["data"] if p["name"] == "default"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"{backend}/projects/{project}/traces/{trace_id}", wait_until="networkidle")
            page.get_by_text("mcp-bridge tool_call", exact=True).first.click(timeout=60000)
            page.get_by_text("mcp_bridge.may_have_run").first.wait_for(timeout=30000)
            page.wait_for_timeout(1000)
            page.screenshot(path=str(picture))
        finally:
            browser.close()
    return passed(name, f"{picture}: trace {trace_id[:12]}")


def _answering_trace(outcome: Outcome, answering: list[list[Span]], expected: list[str]) -> CheckResult:
    name = "a confirmed MCP write is one trace: rasa-sdk, plugin, MCP client and server spans"
    if len(answering) != 1:
        return failed(name, f"{len(answering)} traces of {outcome.script.label} hold the write's tool call")
    [trace] = answering
    names = {s["name"] for s in trace}
    missing = [n for n in expected if n not in names]
    if missing:
        return failed(name, f"missing {missing}; the trace holds {sorted(names)}")
    by_id = {s["context"]["span_id"]: s for s in trace}
    [root] = [s for s in trace if s["parent_id"] is None]
    [call] = _named(trace, "mcp-bridge tool_call", **{"mcp_bridge.tool": WRITE})
    [server] = _named(trace, f"tools/call {WRITE}")
    gates = _named(trace, "mcp-bridge gate", **{"mcp_bridge.tool": WRITE})
    answers = [s["attributes"].get("mcp_bridge.answer") for s in _named(trace, "mcp-bridge answer")]

    def ancestors(span: Span) -> list[str]:
        chain = []
        while span.get("parent_id") in by_id:
            span = by_id[span["parent_id"]]
            chain.append(span["name"])
        return chain

    problems = []
    if root["name"] != "create_app.webhook":
        problems.append(f"the trace starts at {root['name']}, not rasa-sdk's webhook span")
    if (
        call["attributes"].get("mcp_bridge.outcome") != "ok"
        or call["attributes"].get("mcp_bridge.may_have_run") is not True
    ):
        problems.append(f"the tool call's span says {call['attributes']}")
    if "RunConfirmed" not in [g["attributes"].get("mcp_bridge.verdict") for g in gates]:
        problems.append(f"the gate's verdicts: {[g['attributes'] for g in gates]}")
    if answers != ["yes"]:
        problems.append(f"the answers read: {answers}")
    if "mcp-bridge tool_call" not in ancestors(server) or "mcp-bridge skill_run" not in ancestors(call):
        problems.append(f"the server's span is under {ancestors(server)}; the call's under {ancestors(call)}")
    if problems:
        return failed(name, "; ".join(problems))
    chain = " > ".join(reversed([server["name"], *ancestors(server)]))
    [confirmed] = [g for g in gates if g["attributes"].get("mcp_bridge.verdict") == "RunConfirmed"]
    rule = confirmed["attributes"].get("mcp_bridge.rule")
    return passed(
        name,
        f"trace {root['context']['trace_id'][:12]}: {chain}; gate {rule}; "
        "it starts at rasa-sdk's webhook span: Rasa 3.6 sends no traceparent and emits no spans",
    )


def _asking_trace(turns: list[list[Span]], answering: list[list[Span]]) -> CheckResult:
    name = "the question and the gate's Ask are in the trace of the turn that asked"
    asking = [
        t
        for t in turns
        if t not in answering and _named(t, "mcp-bridge question", **{"mcp_bridge.tool": WRITE})
    ]
    if len(asking) != 1:
        return failed(name, f"{len(asking)} traces of the conversation hold the question")
    [trace] = asking
    verdicts = [
        (g["attributes"].get("mcp_bridge.verdict"), g["attributes"].get("mcp_bridge.rule"))
        for g in _named(trace, "mcp-bridge gate", **{"mcp_bridge.tool": WRITE})
    ]
    if ("Ask", "declared") not in verdicts:
        return failed(name, f"the gate's verdicts there: {verdicts}")
    return passed(name, f"question asked; the gate said {verdicts[0]}")


def _no_values(found: list[Span], outcomes: list[Outcome], phrasings: Phrasings) -> CheckResult:
    """No attribute, event or status of any span the backend holds has a note or an email in it."""
    name = "no span attribute holds a note's text or an argument value"
    everything = json.dumps(
        [[s.get("attributes"), s.get("events"), s.get("status_message")] for s in found], ensure_ascii=False
    ).lower()
    values = {o.script.note for o in outcomes} | set(phrasings.notes) | set(phrasings.contacts)
    leaked = sorted(v for v in values if v.lower() in everything)
    if leaked:
        return failed(name, f"found in span data: {leaked[:3]}")
    return passed(
        name, f"{len(found)} spans searched for {len(values)} notes and email addresses: none found"
    )


def audit_checks(stack: ProofStack) -> list[CheckResult]:
    """`mcp-bridge audit verify` passes on the trail the MCP phase wrote, and names the line of a copy
    with one line removed, then of one with one line edited."""
    trail = stack.workdir / "audit-mcp.jsonl"
    env = {**os.environ, "AUDIT_KEY": stack.audit_key}
    env.pop("AUDIT_EXTRA_KEYS", None)

    def verify(path: Path) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "mcp_bridge.cli", "audit", "verify", str(path)]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    name = "`mcp-bridge audit verify` passes on the trail the action server wrote"
    whole = verify(trail)
    results = [(passed if whole.returncode == 0 else failed)(name, (whole.stdout + whole.stderr).strip())]
    lines = trail.read_text(encoding="utf-8").splitlines()
    removed, edited = stack.workdir / "audit-removed.jsonl", stack.workdir / "audit-edited.jsonl"
    middle = len(lines) // 2
    removed.write_text("\n".join(lines[:middle] + lines[middle + 1 :]) + "\n", encoding="utf-8")
    entry = json.loads(lines[middle])
    entry["result"] = "ok" if entry.get("result") != "ok" else "error: edited"
    changed = [*lines[:middle], json.dumps(entry, ensure_ascii=False, sort_keys=True), *lines[middle + 1 :]]
    edited.write_text("\n".join(changed) + "\n", encoding="utf-8")
    for label, path, expected in (
        ("with line", removed, f"line {middle + 1}: the entry before it is not the one it was chained to"),
        ("with line", edited, f"line {middle + 1}: edited"),
    ):
        what = "removed" if path is removed else "edited"
        check = f"`mcp-bridge audit verify` fails on a copy {label} {middle + 1} {what}, naming it"
        run = verify(path)
        ok = run.returncode == 1 and expected in run.stdout
        results.append((passed if ok else failed)(check, run.stdout.strip() or run.stderr.strip()))
    return results
