"""The action server's Prometheus metrics: the same token as /webhook, and counters that move by
exactly what happened in real conversations (webhook calls shaped as Rasa sends them)."""

from __future__ import annotations

import copy
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from crm import tools as crm_tool_functions
from prometheus_client.parser import text_string_to_metric_families

from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.observability import metrics
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.skills.files import domain_responses, load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support import procs
from tests.support.conversation import Conversation, responses, skills_with_source
from tests.support.rasa_calls import FakeTracker, call_action, said

TOKEN = "metrics-test-token-Xq7rV2mK9pL4sN8w"
DANA = "dana@example.com"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def mixed_skills(target: Path) -> Path:
    """The repo's skills with the lookup local and the write over MCP, so both sources are counted."""
    skills = skills_with_source(target, "mcp:crm")
    path = skills / "log_interaction.yml"
    path.write_text(
        path.read_text().replace("find_contact_by_email: mcp:crm", "find_contact_by_email: local")
    )
    return skills


def ask(webhook: str, note: str) -> FakeTracker:
    chat = FakeTracker(f"metrics-{uuid.uuid4().hex}", contact_email=DANA, note_text=note)
    chat.user(f"log a call with {DANA}: {note}", "log_interaction")
    status, answer, _ = call_action(webhook, "action_log_interaction", chat)
    assert status == 200 and said(answer) == ["utter_confirm_note"], answer
    chat.apply("action_log_interaction", answer)
    return chat


def answer(webhook: str, chat: FakeTracker, action: str, text: str, intent: str) -> list[str]:
    chat.user(text, intent)
    status, body, _ = call_action(webhook, action, chat)
    assert status == 200, body
    chat.apply(action, body)
    return said(body)


def test_metrics_count_real_conversations_and_need_the_token(
    services: procs.Services, tmp_path: Path, crm_rest: str, crm_mcp: str
) -> None:
    endpoints = procs.write_endpoints(tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook")
    server = services.start(
        procs.action_server(
            endpoints=endpoints,
            crm_url=crm_rest,
            mcp_url=crm_mcp,
            mcp_token="unused",
            skills_dir=mixed_skills(tmp_path / "skills"),
            audit_log=tmp_path / "audit.jsonl",
            extra_env={"ACTION_SERVER_TOKEN": TOKEN},
        )
    )
    base = server.url.rsplit("/", 1)[0]
    metrics_url = f"{base}/metrics"
    webhook = f"{server.url}?token={TOKEN}"

    assert scrape(metrics_url)[0] == 401
    assert scrape(f"{metrics_url}?token=wrong")[0] == 401
    assert scrape(metrics_url, {"Authorization": "Bearer wrong"})[0] == 401
    status, text = scrape(metrics_url, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    before = samples(text)
    for decision in metrics.DECISIONS:  # shown at 0 before anything happened
        assert ("mcp_bridge_confirmations_total", frozenset({("decision", decision)})) in before

    notes = [f"metrics note {i} {uuid.uuid4().hex}" for i in range(2)]
    confirmed, denied = (ask(webhook, note) for note in notes)
    stale = copy.deepcopy(denied)  # the tracker as it was before the "no", replayed after it
    assert answer(webhook, confirmed, "action_confirm_tool", "yes", "affirm") == ["utter_note_saved"]
    assert answer(webhook, denied, "action_deny_tool", "no", "deny") == ["utter_note_cancelled"]
    assert answer(webhook, stale, "action_confirm_tool", "yes", "affirm") == ["utter_confirmation_invalid"]

    status, text = scrape(f"{metrics_url}?token={TOKEN}")
    assert status == 200
    after = samples(text)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    decisions = {
        decision: moved("mcp_bridge_confirmations_total", decision=decision)
        for decision in ("asked", "confirmed", "denied", "rejected", "expired", "edited", "executed")
    }
    assert decisions == {
        "asked": 2,
        "confirmed": 1,
        "denied": 1,
        "rejected": 1,
        "expired": 0,
        "edited": 0,
        "executed": 1,
    }
    # The audit trail's tool-call entries are counted as tool calls, never as confirmations.
    assert not any(
        name == "mcp_bridge_confirmations_total" and dict(labels).get("decision") == "called"
        for name, labels in after
    )
    calls = {
        (dict(labels)["tool"], dict(labels)["source"], dict(labels)["outcome"]): count
        - before.get((name, labels), 0.0)
        for (name, labels), count in after.items()
        if name == "mcp_bridge_tool_calls_total"
    }
    assert {key: count for key, count in calls.items() if count} == {
        ("find_contact_by_email", "local", "ok"): 2,
        ("add_timeline_note", "mcp", "ok"): 1,
    }
    seconds = "mcp_bridge_tool_call_seconds_count"
    assert moved(seconds, tool="find_contact_by_email", source="local") == 2
    assert moved(seconds, tool="add_timeline_note", source="mcp") == 1
    assert moved("mcp_bridge_tool_call_seconds_sum", tool="add_timeline_note", source="mcp") > 0
    # One session, opened when the first question checked the MCP tool's schema, reused since.
    assert value(after, "mcp_bridge_mcp_sessions_opened_total", server="crm") == 1
    assert value(after, "process_resident_memory_bytes") > 0
    for secret in (*notes, TOKEN):
        assert secret not in text


async def test_expired_confirmation_is_counted_once(crm_tools: ModuleType, tmp_path: Path) -> None:
    """A "yes" after the TTL is asked again, and counted as expired (not as confirmed)."""
    now = [1000.0]
    skills = load_skills(
        skills_with_source(tmp_path / "skills", "local"),
        local_tools=crm_tool_functions.TOOLS,
        mcp_servers={},
        responses=domain_responses(procs.EXAMPLE_BOT / "domain.yml"),
    )
    executor = Executor(
        skills,
        ToolBox(crm_tool_functions.TOOLS, None),
        audit=AuditLog(None, observers=[metrics.count_confirmation]),
        clock=lambda: now[0],
    )
    counted = metrics.REGISTRY.get_sample_value

    def count(decision: str) -> float:
        return counted("mcp_bridge_confirmations_total", {"decision": decision}) or 0.0

    before = {decision: count(decision) for decision in ("asked", "expired", "confirmed", "asked_again")}
    chat = Conversation(executor, contact_email=DANA, note_text=f"expiring {uuid.uuid4().hex}")
    assert (await chat.start()).outcome == "pending"
    now[0] += executor.policy.ttl_seconds + 1
    again = await chat.yes()
    assert again.outcome == "pending" and responses(again)[0] == "utter_confirmation_expired"
    after = {decision: count(decision) for decision in before}
    assert {key: after[key] - before[key] for key in before} == {
        "asked": 2,  # the question, and the question again
        "expired": 1,
        "confirmed": 0,
        "asked_again": 0,
    }
