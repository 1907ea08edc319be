"""The plugin's spans: a confirmed write is a trace of the skill's run, the gate's verdict with its
rule, the question, the answer's kind and the tool call; the MCP server gets the trace context in
``_meta`` unless its ``trace_context`` is off; no span carries an argument value or the answer's text;
and with tracing off nothing is made (mcp_bridge.observability.tracing)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="OpenTelemetry's SDK (rasa-sdk 3.21 brings it)")

from opentelemetry import propagate
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability import tracing
from mcp_bridge.observability.audit import AuditKeys, AuditLog
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support.conversation import Conversation
from tests.support.fixture_tools import SERVER, Notebook, NotebookServer, local_tools, servers, write_skills

DANA = "dana@example.com"
NOTE = "Dana asked about the VAT rate on invoice 4471"


@pytest.fixture(scope="module")
def book() -> Notebook:
    return Notebook()


@pytest.fixture(scope="module")
def notebook_url(book: Notebook) -> Iterator[str]:
    with NotebookServer(book) as server:
        yield server.url


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """Spans of a provider of the test's own (not made global: the process's stays untouched)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    textmap = propagate.get_global_textmap()
    tracing._state.looked_up = True  # as configure() does, without making the provider global
    tracing._state.tracer = provider.get_tracer("mcp_bridge")
    tracing._install_propagator()
    yield exporter
    tracing._state.tracer = None
    tracing._state.looked_up = False
    propagate.set_global_textmap(textmap)


async def _confirmed_write(
    source: str, url: str, book: Notebook, tmp_path: Path, **server_keys: Any
) -> tuple[Conversation, Executor]:
    configured = servers(url, trusted=True, honours_idempotency_key=True, **server_keys)
    tools = local_tools(book)
    skills = load_skills(
        write_skills(tmp_path / "skills", source), local_tools=tools, mcp_servers=configured, responses=None
    )
    audit = AuditLog(tmp_path / "audit.jsonl", keys=AuditKeys.random(), observers=[tracing.audit_span])
    executor = Executor(skills, ToolBox(tools, MCPRuntime(configured), audit=audit), audit=audit)
    chat = Conversation(executor, contact_email=DANA, note_text=NOTE)
    await chat.start()
    await chat.yes()
    return chat, executor


@pytest.fixture
async def closing() -> AsyncIterator[list[Executor]]:
    made: list[Executor] = []
    yield made
    for executor in made:
        await executor.aclose()


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.mark.parametrize("source", ["local", f"mcp:{SERVER}"])
async def test_a_confirmed_write_is_traced_by_names_only(
    source: str,
    exported: InMemorySpanExporter,
    notebook_url: str,
    book: Notebook,
    tmp_path: Path,
    closing: list[Executor],
) -> None:
    chat, executor = await _confirmed_write(source, notebook_url, book, tmp_path)
    closing.append(executor)
    assert book.notes_for(DANA)[-1] == NOTE
    spans = exported.get_finished_spans()

    gates = [_attributes(span) for span in _by_name(spans, "mcp-bridge gate")]
    write_gates = [g for g in gates if g["mcp_bridge.tool"] == "add_timeline_note"]
    # Reached: ask (the skill declares it); after the yes: run confirmed, by the same rule.
    verdicts = [(g["mcp_bridge.verdict"], g["mcp_bridge.rule"]) for g in write_gates]
    assert verdicts[0] == ("Ask", "declared") and verdicts[-1] == ("RunConfirmed", "declared")
    assert ("RunConfirmed", "declared") not in verdicts[:-1]
    assert [_attributes(s)["mcp_bridge.answer"] for s in _by_name(spans, "mcp-bridge answer")] == ["yes"]
    [question] = _by_name(spans, "mcp-bridge question")
    assert _attributes(question)["mcp_bridge.decision"] == "asked"
    calls = {
        _attributes(s)["mcp_bridge.tool"]: _attributes(s) for s in _by_name(spans, "mcp-bridge tool_call")
    }
    assert calls["add_timeline_note"]["mcp_bridge.outcome"] == "ok"
    assert calls["add_timeline_note"]["mcp_bridge.may_have_run"] is True
    assert calls["add_timeline_note"]["mcp_bridge.source"] == source
    assert ("mcp_bridge.server" in calls["add_timeline_note"]) == (source != "local")

    # names_only: no attribute, event or status holds the note, the email or any part of them.
    everything = json.dumps(
        [
            [_attributes(s), [(e.name, dict(e.attributes or {})) for e in s.events], s.status.description]
            for s in spans
        ],
        default=str,
    )
    for secret in (NOTE, DANA, "4471", "yes"):
        assert secret not in everything.replace('"mcp_bridge.answer": "yes"', "")
    assert all(key.startswith(("mcp_bridge.", "error.")) for s in spans for key in _attributes(s))


async def test_the_mcp_server_gets_the_trace_context_of_the_call(
    exported: InMemorySpanExporter, notebook_url: str, book: Notebook, tmp_path: Path, closing: list[Executor]
) -> None:
    seen = len(book.metas)
    chat, executor = await _confirmed_write(f"mcp:{SERVER}", notebook_url, book, tmp_path)
    closing.append(executor)
    [meta] = book.metas[seen:]
    [call] = [
        s
        for s in _by_name(exported.get_finished_spans(), "mcp-bridge tool_call")
        if _attributes(s)["mcp_bridge.tool"] == "add_timeline_note"
    ]
    version, trace_id, parent_id, flags = meta["traceparent"].split("-")
    assert trace_id == format(call.context.trace_id, "032x")
    # The tool call's span, or the MCP SDK's own client span beneath it (mcp 2.x, with a global provider).
    assert parent_id == format(call.context.span_id, "016x")
    assert meta["idempotency_key"]


async def test_a_server_with_trace_context_off_gets_none(
    exported: InMemorySpanExporter, notebook_url: str, book: Notebook, tmp_path: Path, closing: list[Executor]
) -> None:
    seen = len(book.metas)
    chat, executor = await _confirmed_write(
        f"mcp:{SERVER}", notebook_url, book, tmp_path, trace_context=False
    )
    closing.append(executor)
    [meta] = book.metas[seen:]
    assert "traceparent" not in meta and "tracestate" not in meta
    assert meta["idempotency_key"]  # the rest of _meta still goes
    assert _by_name(exported.get_finished_spans(), "mcp-bridge tool_call")  # still traced here


async def test_tracing_off_makes_no_span_and_sends_no_context(
    notebook_url: str, book: Notebook, tmp_path: Path, closing: list[Executor]
) -> None:
    tracing.configure(None)  # no provider from rasa-sdk, and no global one in this process
    try:
        assert not tracing.enabled()
        assert tracing.span("mcp-bridge gate", tool="x") is tracing._OFF
        seen = len(book.metas)
        chat, executor = await _confirmed_write(f"mcp:{SERVER}", notebook_url, book, tmp_path)
        closing.append(executor)
        [meta] = book.metas[seen:]
        assert "traceparent" not in meta
    finally:
        tracing._state.looked_up = False


def test_attributes_outside_the_list_are_dropped() -> None:
    cleaned = tracing._clean({"tool": "add_timeline_note", "text": NOTE, "arguments": "x", "outcome": None})
    assert cleaned == {"mcp_bridge.tool": "add_timeline_note"}
