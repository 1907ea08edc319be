"""Rasa Pro's ``mcp_servers`` keys on the wire: what a real MCP server receives from the bridge.

The server is tests/fixtures/reminder_server.py, on a free port; it records each tool call's HTTP
headers and ``_meta`` (``GET /calls``) and its writes (``GET /writes``). Configurations are read
from endpoints.yml text, as the action server reads them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import textwrap
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.config.servers import MCPServerConfig, load_mcp_servers
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.contract import PENDING_SLOT
from mcp_bridge.errors import ServerUnavailableError, ToolTimeoutError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support import procs
from tests.support.bots import SKILL_BLOCK, guide_block
from tests.support.conversation import Conversation, asked_call, responses

SECRET = "s3cr3t-rasa-pro-value"


@pytest.fixture(scope="module")
def reminders() -> Iterator[str]:
    with procs.reminders_mcp() as server:
        yield server.url


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(procs.base_url(url) + path, timeout=5) as response:
        return json.loads(response.read())


def servers_from(tmp_path: Path, url: str, keys: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    path = tmp_path / "endpoints.yml"
    body = textwrap.indent(textwrap.dedent(keys).strip(), "    ")
    path.write_text(f'mcp_servers:\n  - name: reminders\n    url: "{url}"\n    type: http\n{body}\n')
    return load_mcp_servers(path, env={"REMINDERS_SECRET": SECRET, **(env or {})})


async def received(url: str, servers: dict[str, MCPServerConfig], **slots: Any) -> dict[str, Any]:
    """Call list_reminders with ``servers``; what the server received for that call."""
    before = len(get(url, "/calls"))
    runtime = MCPRuntime(servers, connect_timeout=5.0)
    try:
        result = await runtime.invoke("reminders", "list_reminders", {}, slots=slots)
    finally:
        await runtime.aclose()
    assert result.ok
    calls = get(url, "/calls")
    assert len(calls) == before + 1
    call: dict[str, Any] = calls[-1]
    return call


# --- authentication headers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "header", "value"),
    [
        ('token: "${REMINDERS_SECRET}"', "authorization", f"Bearer {SECRET}"),
        # Rasa Pro's defaults for api_key: header_name Authorization, header_format "Bearer {key}".
        ('api_key: "${REMINDERS_SECRET}"', "authorization", f"Bearer {SECRET}"),
        ('api_key: "${REMINDERS_SECRET}"\nheader_name: X-API-Key', "x-api-key", f"Bearer {SECRET}"),
        (
            'api_key: "${REMINDERS_SECRET}"\nheader_name: X-API-Key\nheader_format: "{key}"',
            "x-api-key",
            SECRET,
        ),
        ('api_key: "${REMINDERS_SECRET}"\nheader_format: "Token {key}"', "authorization", f"Token {SECRET}"),
    ],
    ids=["token", "api_key-defaults", "api_key-header_name", "api_key-name-and-format", "api_key-format"],
)
async def test_the_authentication_header_arrives_as_rasa_pro_sends_it(
    reminders: str, tmp_path: Path, keys: str, header: str, value: str
) -> None:
    call = await received(reminders, servers_from(tmp_path, reminders, keys))
    assert call["headers"][header] == value
    if header != "authorization":
        assert "authorization" not in call["headers"]


async def test_no_key_sends_no_authentication_header(reminders: str, tmp_path: Path) -> None:
    call = await received(reminders, servers_from(tmp_path, reminders, "trusted: false"))
    assert "authorization" not in call["headers"]


async def test_secrets_stay_out_of_logs_and_reprs(
    reminders: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    servers = servers_from(tmp_path, reminders, 'api_key: "${REMINDERS_SECRET}"\nheader_name: X-API-Key')
    token_servers = servers_from(tmp_path, reminders, 'token: "${REMINDERS_SECRET}"')
    caplog.set_level(logging.DEBUG)
    await received(reminders, servers)
    await received(reminders, token_servers)
    assert SECRET not in caplog.text
    for config in (servers["reminders"], token_servers["reminders"]):
        assert SECRET not in repr(config) and SECRET not in str(config)


# --- meta_map ------------------------------------------------------------------------------------

META_MAP = """
meta_map:
  static:
    source: rasa
    api_version: "2"
  from_slots:
    - {slot: user_id, param: user}
    - {slot: tenant, param: tenant_id}
"""


async def test_static_and_slot_values_arrive_in_meta(reminders: str, tmp_path: Path) -> None:
    servers = servers_from(tmp_path, reminders, META_MAP)
    call = await received(reminders, servers, user_id="u-42", tenant="acme", other="not sent")
    assert call["meta"] == {"source": "rasa", "api_version": "2", "user": "u-42", "tenant_id": "acme"}


async def test_an_unset_slot_is_not_sent(reminders: str, tmp_path: Path) -> None:
    """As with Rasa Pro: its null for an unset slot is dropped by its MCP client (exclude_none)."""
    servers = servers_from(tmp_path, reminders, META_MAP)
    assert servers["reminders"].call_meta({"user_id": None}) == {"source": "rasa", "api_version": "2"}
    call = await received(reminders, servers, user_id=None)
    assert call["meta"] == {"source": "rasa", "api_version": "2"}


async def test_no_meta_map_sends_no_meta(reminders: str, tmp_path: Path) -> None:
    call = await received(reminders, servers_from(tmp_path, reminders, "trusted: false"), user_id="u-42")
    assert call["meta"] == {}


@pytest.fixture
async def reminder_executor(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Executor] = []

    def make(servers: dict[str, MCPServerConfig]) -> Executor:
        skills_dir = tmp_path / f"skills-{len(made)}"
        skills_dir.mkdir()
        (skills_dir / "save_reminder.yml").write_text(guide_block(SKILL_BLOCK))
        skills = load_skills(skills_dir, local_tools={}, mcp_servers=servers, responses=None)
        audit = AuditLog(skills_dir / "audit.jsonl")
        executor = Executor(skills, ToolBox({}, MCPRuntime(servers, connect_timeout=5.0)), audit=audit)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        await executor.aclose()


async def test_a_confirmed_write_carries_the_slots_next_to_its_idempotency_key(
    reminders: str, tmp_path: Path, reminder_executor: Any
) -> None:
    """The whole path: the executor asks, the yes writes, and _meta holds meta_map and the key."""
    executor = reminder_executor(servers_from(tmp_path, reminders, META_MAP))
    chat = Conversation(executor, reminder_text="water the plants", user_id="u-7", tenant=None)
    assert (await chat.start("save_reminder")).outcome == "pending"
    key = asked_call(chat.slots[PENDING_SLOT])["id"]
    decision = await chat.yes()
    assert responses(decision) == ["utter_reminder_saved"], decision
    write = get(reminders, "/calls")[-1]
    assert write["tool"] == "create_reminder"
    assert write["meta"] == {"source": "rasa", "api_version": "2", "user": "u-7", "idempotency_key": key}


async def test_a_yes_sends_the_meta_slots_the_person_was_asked_under_not_what_a_tracker_says_by_then(
    reminders: str, tmp_path: Path, reminder_executor: Any
) -> None:
    """_meta's slots are sealed with the question: a tracker rewritten between question and yes (Rasa's
    API, its tracker store) cannot send another identity with the confirmed write."""
    executor = reminder_executor(servers_from(tmp_path, reminders, META_MAP))
    chat = Conversation(executor, reminder_text="water the plants again", user_id="u-7", tenant=None)
    assert (await chat.start("save_reminder")).outcome == "pending"
    chat.slots["user_id"] = "u-admin"  # written into the tracker after the question
    decision = await chat.yes()
    assert responses(decision) == ["utter_reminder_saved"], decision
    write = get(reminders, "/calls")[-1]
    assert write["meta"]["user"] == "u-7"


# --- tool_timeout --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_reminders() -> Iterator[str]:
    """create_reminder writes at once and answers 1.5 s later."""
    with procs.reminders_mcp(answer_delay=1.5) as server:
        yield server.url


async def test_tool_timeout_cuts_a_slow_call_and_says_it_may_have_run(
    slow_reminders: str, tmp_path: Path
) -> None:
    servers = servers_from(tmp_path, slow_reminders, "tool_timeout: 0.3")
    assert servers["reminders"].timeout == 0.3
    runtime = MCPRuntime(servers, connect_timeout=5.0)
    before = get(slow_reminders, "/writes")["count"]
    try:
        started = time.monotonic()
        with pytest.raises(ToolTimeoutError, match=r"no answer within 0\.3 s; it may still have run") as info:
            await runtime.invoke("reminders", "create_reminder", {"text": "cut short"})
        assert time.monotonic() - started < 1.4  # cut before the answer came
        assert info.value.may_have_run
    finally:
        await runtime.aclose()
    # It had run: the person must not be told that nothing was written.
    assert get(slow_reminders, "/writes")["count"] == before + 1


async def test_a_tool_timeout_longer_than_the_call_lets_it_answer(
    slow_reminders: str, tmp_path: Path
) -> None:
    runtime = MCPRuntime(servers_from(tmp_path, slow_reminders, "tool_timeout: 5"), connect_timeout=5.0)
    try:
        assert (await runtime.invoke("reminders", "create_reminder", {"text": "in time"})).ok
    finally:
        await runtime.aclose()


async def test_a_confirmed_write_cut_by_tool_timeout_is_reported_as_outcome_unknown(
    slow_reminders: str, tmp_path: Path, reminder_executor: Any
) -> None:
    """Declared to honour the key, the server gets the write again under the same key (it keeps one
    write), and then the person hears the outcome is unknown: never that nothing happened."""
    executor = reminder_executor(
        servers_from(tmp_path, slow_reminders, "tool_timeout: 0.3\nhonours_idempotency_key: true")
    )
    chat = Conversation(executor, reminder_text="call the plumber")
    await chat.start("save_reminder")
    key = asked_call(chat.slots[PENDING_SLOT])["id"]
    before = get(slow_reminders, "/writes")["count"]
    decision = await chat.yes()
    assert decision.outcome == "unavailable"
    assert responses(decision) == ["utter_tool_outcome_unknown"]
    assert get(slow_reminders, "/writes")["count"] == before + 1
    calls = [call for call in get(slow_reminders, "/calls") if call["meta"].get("idempotency_key") == key]
    assert len(calls) == 2


@pytest.fixture(scope="module")
def careless_reminders() -> Iterator[str]:
    """create_reminder ignores idempotency keys (every call writes), and answers 1.5 s late."""
    with procs.reminders_mcp(answer_delay=1.5, ignore_key=True) as server:
        yield server.url


async def test_a_server_not_declared_to_honour_the_key_is_never_repeated(
    careless_reminders: str, tmp_path: Path, reminder_executor: Any
) -> None:
    """It saved, then timed out: one write, one call, and the person told it may have been saved."""
    executor = reminder_executor(servers_from(tmp_path, careless_reminders, "tool_timeout: 0.3"))
    chat = Conversation(executor, reminder_text="renew the passport")
    await chat.start("save_reminder")
    key = asked_call(chat.slots[PENDING_SLOT])["key"]
    before = get(careless_reminders, "/writes")["count"]
    decision = await chat.yes()
    assert responses(decision) == ["utter_tool_outcome_unknown"]
    await asyncio.sleep(1.6)  # let the late answer land: the write count is final
    assert get(careless_reminders, "/writes")["count"] == before + 1
    calls = [c for c in get(careless_reminders, "/calls") if c["meta"].get("idempotency_key") == key]
    assert len(calls) == 1
    # The audit says what the person was told: not saved, not failed, unknown.
    assert '"result": "outcome unknown"' in (tmp_path / "skills-0" / "audit.jsonl").read_text()


# --- unset variables -----------------------------------------------------------------------------


async def test_a_server_read_without_its_variables_is_never_contacted(reminders: str, tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yml"
    path.write_text(
        f'mcp_servers:\n  - name: reminders\n    url: "{reminders}"\n    type: http\n'
        '    token: "${REMINDERS_UNSET_TOKEN}"\n'
    )
    servers = load_mcp_servers(path, env={}, allow_unset=True)
    before = len(get(reminders, "/calls"))
    runtime = MCPRuntime(servers, connect_timeout=5.0)
    try:
        with pytest.raises(
            ServerUnavailableError, match="environment variable REMINDERS_UNSET_TOKEN is not set"
        ):
            await runtime.invoke("reminders", "list_reminders", {})
    finally:
        await runtime.aclose()
    assert len(get(reminders, "/calls")) == before
