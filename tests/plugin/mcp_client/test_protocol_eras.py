"""Both protocol generations: the runtime and the executor against a 2026-07-28-only server, a
2025-11-25-only server and one that speaks both (tests/fixtures/era_server.py, real processes).

At mcp 1.30 (Rasa Pro's environment, ``make pytest-pro``) the bridge has the initialize handshake
only: it speaks 2025-11-25 to a server that speaks both, and refuses a 2026-07-28-only server with
a message that says so, writing nothing.

The server's ``GET /methods`` shows which era the bridge used from the server's side (``initialize``
or ``server/discover``), and ``GET /writes`` counts its writes. Also here: a result that breaks the
tool's own output schema is an error naming the tool and the field, and says the tool ran.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcp_bridge.config.servers import MCPServerConfig, OAuthConfig
from mcp_bridge.confirmation.executor import Executor
from mcp_bridge.errors import ServerUnavailableError, ToolArgumentsError, ToolResultInvalidError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.mcp_sdk import MCP_1
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.skills.files import load_skills
from mcp_bridge.skills.toolbox import ToolBox
from tests.support import procs
from tests.support.conversation import Conversation, responses

# The era a server speaks, and the revision the bridge then speaks to it.
ERAS = (
    {"legacy": "2025-11-25", "both": "2025-11-25"}
    if MCP_1
    else {"modern": "2026-07-28", "legacy": "2025-11-25", "both": "2026-07-28"}
)

SKILL = """
skill: save_item
action: action_save_item
description: Save an item, after the person confirms.
tools:
  add_item: mcp:items
  broken_output: mcp:items
tool_constraints:
  - add_item:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_item
        utter_on_user_denial: utter_item_cancelled
  - broken_output:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_item
        utter_on_user_denial: utter_item_cancelled
steps:
  - execute_tool: {tool}
    arguments:
      text: {{slot: item_text}}
    on_success: utter_item_saved
    on_error: utter_tool_failed
reset_slots: [item_text]
"""


@pytest.fixture(scope="module", params=list(ERAS))
def era_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, procs.ServiceProcess]]:
    with procs.era_mcp(request.param) as server:
        yield request.param, server


def get(server: procs.ServiceProcess, path: str) -> Any:
    return httpx2.get(procs.base_url(server.url) + path, timeout=5.0).json()


@pytest.fixture
async def runtime(era_server: tuple[str, procs.ServiceProcess]) -> AsyncIterator[MCPRuntime]:
    made = MCPRuntime({"items": MCPServerConfig(name="items", url=era_server[1].url)}, connect_timeout=5.0)
    try:
        yield made
    finally:
        await made.aclose()


async def test_the_era_the_server_speaks_is_negotiated_and_used(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime
) -> None:
    era, server = era_server
    before = len(get(server, "/methods"))
    assert {"add_item", "list_items", "broken_output", "no_content", "refuse"} <= set(
        await runtime.tools("items")
    )
    described = await runtime.describe("items")
    assert described.protocol_version == ERAS[era]
    assert described.server_info is not None and described.server_info.startswith("items")
    # The SDK's server announces tool-list changes to 2026-07-28 clients only (subscriptions/listen).
    handshake = ERAS[era] == "2025-11-25"
    assert ("tools" if handshake else "tools (listChanged)") in described.capabilities
    assert (await runtime.invoke("items", "list_items", {})).ok
    sent = get(server, "/methods")[before:]
    if era == "legacy":
        assert sent[:2] == ["initialize", "notifications/initialized"], sent
        assert "server/discover" not in sent  # refused at the door: the probe never reached the SDK
    elif handshake:
        assert sent[:2] == ["initialize", "notifications/initialized"], sent  # mcp 1.30 never probes
        assert "server/discover" not in sent
    else:
        assert sent[0] == "server/discover" and "initialize" not in sent, sent
    # One connection for every call: the handshake (or the probe) happens once.
    for _ in range(5):
        assert (await runtime.invoke("items", "list_items", {})).ok
    assert runtime.sessions_opened == 1
    everything = get(server, "/methods")[before:]
    assert everything.count("initialize") + everything.count("server/discover") == 1


async def until_listed(runtime: MCPRuntime, name: str) -> bool:
    for _ in range(50):
        if name in await runtime.tools("items"):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_the_catalogue_follows_the_servers_announcements_in_either_era(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime
) -> None:
    """2025-11-25: tools/list_changed on the session's stream; 2026-07-28: subscriptions/listen."""
    era, _ = era_server
    name = f"late_{era}"
    assert name not in await runtime.tools("items")
    assert (await runtime.invoke("items", "add_tool", {"name": name})).ok
    assert await until_listed(runtime, name)
    assert runtime.sessions_opened == 1


@pytest.mark.skipif(MCP_1, reason="mcp 1.30 cannot speak 2026-07-28 (the refusal has its own test)")
async def test_after_a_modern_server_restart_the_catalogue_still_follows_it(services: procs.Services) -> None:
    port = procs.free_port()
    server = services.start(procs.era_mcp("modern", port))
    runtime = MCPRuntime({"items": MCPServerConfig(name="items", url=server.url)}, connect_timeout=5.0)
    try:
        assert "late" not in await runtime.tools("items")
        server.stop()
        services.start(procs.era_mcp("modern", port))
        # The listen stream was lost with the old process; the bridge listens to the new one.
        await asyncio.sleep(2.5)
        assert "late" not in await runtime.tools("items")  # read afresh after the loss: nothing stale now
        assert (await runtime.invoke("items", "add_tool", {"name": "late"})).ok
        assert await until_listed(runtime, "late")
        assert runtime.sessions_opened == 1
    finally:
        await runtime.aclose()


@pytest.mark.skipif(not MCP_1, reason="mcp 2.3 speaks 2026-07-28 (the tests above)")
async def test_at_mcp_1_30_a_2026_07_28_only_server_is_refused_saying_why_and_nothing_is_written(
    services: procs.Services, tmp_path: Path
) -> None:
    server = services.start(procs.era_mcp("modern", refused_here=True))
    runtime = MCPRuntime({"items": MCPServerConfig(name="items", url=server.url)}, connect_timeout=5.0)
    try:
        with pytest.raises(ServerUnavailableError) as refused:
            await runtime.tools("items")
        assert "RevisionUnsupportedError" in str(refused.value), refused.value
        assert "only the 2026-07-28 revision" in str(refused.value) and "mcp 2.3" in str(refused.value)
    finally:
        await runtime.aclose()
    # Through the executor: the person is never asked (the tool cannot be resolved at that server),
    # is told the tool is unavailable, and nothing reaches the server.
    executor = executor_at(server.url, "add_item", tmp_path / "skills", tmp_path / "audit.jsonl")
    try:
        chat = Conversation(executor, item_text="buy milk")
        decision = await chat.start("save_item")
        assert decision.outcome == "unavailable", decision
        assert responses(decision) == ["utter_tool_unavailable"], decision
        assert get(server, "/writes")["count"] == 0
        assert "tools/call" not in get(server, "/methods")
    finally:
        await executor.aclose()


async def test_a_bad_argument_is_refused_before_sending_in_either_era(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime
) -> None:
    _, server = era_server
    before = get(server, "/writes")["count"]
    with pytest.raises(ToolArgumentsError, match="text: shorter than 1 characters"):
        await runtime.invoke("items", "add_item", {"text": ""})
    assert get(server, "/writes")["count"] == before


async def test_a_tool_error_is_ok_false_in_either_era(runtime: MCPRuntime) -> None:
    result = await runtime.invoke("items", "refuse", {"text": "x"})
    assert result.ok is False
    assert result.error is not None and "the item store is read-only today" in result.error


async def test_a_result_that_breaks_its_output_schema_is_an_error_naming_tool_and_field(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    _, server = era_server
    before = get(server, "/writes")["count"]
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ToolResultInvalidError) as caught:
        await runtime.invoke("items", "broken_output", {"text": "secret note text"})
    message = str(caught.value)
    assert "MCP tool 'broken_output' on server 'items'" in message
    assert "breaks its output schema (count: must be of type integer)" in message
    assert "the result was not used" in message and "it may have written" in message
    assert caught.value.may_have_run is True
    assert "three" not in message  # the value is not repeated (results can carry note text)
    # The tool ran once, and the runtime did not repeat it.
    assert get(server, "/writes")["count"] == before + 1
    with pytest.raises(ToolResultInvalidError, match="publishes an output schema but answered without"):
        await runtime.invoke("items", "no_content", {})


def executor_at(url: str, tool: str, skills_dir: Path, audit: Path) -> Executor:
    """An executor whose one skill saves an item with ``tool`` of the MCP server at ``url``."""
    skills_dir.mkdir()
    (skills_dir / "save_item.yml").write_text(SKILL.format(tool=tool), encoding="utf-8")
    servers = {"items": MCPServerConfig(name="items", url=url)}
    skills = load_skills(skills_dir, local_tools={}, mcp_servers=servers, responses=None)
    return Executor(skills, ToolBox({}, MCPRuntime(servers, connect_timeout=5.0)), audit=AuditLog(audit))


@pytest.fixture
async def executor(era_server: tuple[str, procs.ServiceProcess], tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Executor] = []

    def make(tool: str, audit: Path) -> Executor:
        built = executor_at(era_server[1].url, tool, tmp_path / f"skills-{len(made)}", audit)
        made.append(built)
        return built

    yield make
    for built in made:
        await built.aclose()


async def test_a_confirmed_write_through_the_executor_lands_once_in_either_era(
    era_server: tuple[str, procs.ServiceProcess], executor: Any, tmp_path: Path
) -> None:
    _, server = era_server
    chat = Conversation(executor("add_item", tmp_path / "audit.jsonl"), item_text="buy milk")
    before = get(server, "/writes")["count"]
    assert (await chat.start("save_item")).outcome == "pending"
    assert get(server, "/writes")["count"] == before  # asked, not written
    decision = await chat.yes()
    assert responses(decision) == ["utter_item_saved"], decision
    writes = get(server, "/writes")
    assert writes["count"] == before + 1 and writes["texts"][-1] == "buy milk"
    # And a no writes nothing.
    chat.slots["item_text"] = "buy bread"
    assert (await chat.start("save_item")).outcome == "pending"
    assert responses(await chat.no()) == ["utter_item_cancelled"]
    assert get(server, "/writes")["count"] == before + 1


async def test_a_confirmed_write_whose_result_breaks_the_schema_says_the_outcome_is_unknown(
    era_server: tuple[str, procs.ServiceProcess],
    executor: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, server = era_server
    audit = tmp_path / "audit.jsonl"
    chat = Conversation(executor("broken_output", audit), item_text="call the bank")
    before = get(server, "/writes")["count"]
    assert (await chat.start("save_item")).outcome == "pending"
    decision = await chat.yes()
    # Never "saved" (the result is not trusted), never "nothing was written" (the tool ran).
    assert decision.outcome == "unavailable"
    assert responses(decision) == ["utter_tool_result_invalid"], decision
    assert decision.say[0].variables["tool_name"] == "broken_output"
    assert get(server, "/writes")["count"] == before + 1
    assert (
        "MCP tool 'broken_output' on server 'items' answered with a result that breaks its output schema"
        in (caplog.text)
    )
    assert '"result": "outcome unknown"' in audit.read_text()


def test_the_auth_description_names_the_kind_and_never_the_secret() -> None:
    secret = "s3cr3t-value"
    url = "http://127.0.0.1:9/mcp"
    cases = {
        "none": MCPServerConfig(name="a", url=url),
        "token (Authorization: Bearer)": MCPServerConfig(name="a", url=url, token=secret),
        "api_key (header X-API-Key)": MCPServerConfig(
            name="a", url=url, api_key=secret, header_name="X-API-Key"
        ),
        "oauth client credentials (client_id bridge, token_url https://auth.example/token, "
        "scope notes:write)": (
            MCPServerConfig(
                name="a",
                url=url,
                oauth=OAuthConfig(
                    client_id="bridge",
                    client_secret=secret,
                    token_url="https://auth.example/token",
                    scope="notes:write",
                ),
            )
        ),
        "oauth acting as the person (authorization code with PKCE; client_id bridge-person, scope "
        "notes:write, redirect_uri http://127.0.0.1:5055/mcp-bridge/oauth/callback)": (
            MCPServerConfig(
                name="a",
                url=url,
                oauth=OAuthConfig(
                    client_id="bridge-person",
                    client_secret=secret,
                    scope="notes:write",
                    grant="authorization_code",
                    redirect_uri="http://127.0.0.1:5055/mcp-bridge/oauth/callback",
                ),
            )
        ),
    }
    for expected, config in cases.items():
        assert config.auth_description() == expected
        assert secret not in config.auth_description()
