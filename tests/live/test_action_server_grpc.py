"""`mcp-bridge grpc`: the bot's actions over rasa-sdk 3.21's gRPC protocol, with the plugin's guarantees.

The client is built from rasa_sdk's own protobuf stubs (``rasa_sdk.grpc_py``), as Rasa Pro's is.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rasa_sdk.grpc_server", reason="gRPC serving arrived in rasa-sdk 3.21")

import grpc  # noqa: E402
from google.protobuf.json_format import MessageToDict, ParseDict  # noqa: E402
from rasa_sdk.grpc_py import action_webhook_pb2, action_webhook_pb2_grpc  # noqa: E402

from mcp_bridge.contract import PENDING_SLOT  # noqa: E402
from tests.support import procs  # noqa: E402
from tests.support.conversation import notes_for  # noqa: E402
from tests.support.rasa_calls import FakeTracker  # noqa: E402

TOKEN = "mcp-test-token-of-the-crm-server-8Hs3Dq"
SERVER_TOKEN = "grpc-shared-secret-8Jw2Qm5Xr9Tk3Lp7"
DANA = "dana@example.com"
MCP_BRIDGE = [str(Path(__import__("sys").executable).parent / "mcp-bridge")]


def listening_addresses(port: int) -> set[str]:
    """Addresses listening on TCP ``port``, IPv4 and IPv6 (gRPC binds an IPv6 socket; a v4-mapped
    address such as ::ffff:127.0.0.1 is given as its IPv4 form)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:
                continue
            raw = bytes.fromhex(address)
            # /proc prints each 32-bit word of the address in host (little-endian) order.
            ordered = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(ordered)
            mapped = getattr(ip, "ipv4_mapped", None)
            found.add(str(mapped or ip))
    return found


def grpc_server(
    endpoints: Path, crm_rest: str, crm_mcp: str, *, port: int | None = None, **env: str
) -> procs.ServiceProcess:
    port = port or procs.free_port()
    base = procs.action_server(endpoints=endpoints, crm_url=crm_rest, mcp_url=crm_mcp, mcp_token=TOKEN)
    del base.env["ACTION_SERVER_HOST"]
    base.env.update({"ACTION_SERVER_TOKEN": SERVER_TOKEN, **env})

    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    return procs.ServiceProcess(
        "grpc-action-server",
        [*MCP_BRIDGE, "grpc", "--actions", "actions", "--port", str(port)],
        env=base.env,
        ready_check=ready,
        url=f"127.0.0.1:{port}",
        start_timeout=60.0,
    )


@pytest.fixture
def endpoints(tmp_path: Path) -> Path:
    return procs.write_endpoints(tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook")


def webhook(address: str, action: str, tracker: FakeTracker, token: str | None) -> dict[str, Any]:
    payload = tracker.payload(action)
    payload["domain"] = {}  # the plugin's actions read the tracker, not the domain
    payload["tracker"]["active_loop"] = {"name": tracker.active_loop} if tracker.active_loop else {}
    request = ParseDict(payload, action_webhook_pb2.WebhookRequest(), ignore_unknown_fields=True)
    metadata = [("authorization", f"Bearer {token}")] if token else []
    with grpc.insecure_channel(address) as channel:
        stub = action_webhook_pb2_grpc.ActionServiceStub(channel)
        response = stub.Webhook(request, metadata=metadata, timeout=30)
    return MessageToDict(response, preserving_proto_field_name=True)


def responses(answer: dict[str, Any]) -> list[str]:
    return [str(r.get("response")) for r in answer.get("responses", [])]


def test_grpc_serves_a_yes_once_a_no_never_and_only_with_the_token(
    services: procs.Services, endpoints: Path, crm_rest: str, crm_mcp: str, crm_db: Path
) -> None:
    server = services.start(grpc_server(endpoints, crm_rest, crm_mcp))
    assert listening_addresses(int(server.url.split(":")[1])) == {"127.0.0.1"}
    nothing = FakeTracker(f"grpc-{uuid.uuid4().hex}").user("yes", "affirm", 1.0)
    for token in (None, "wrong"):
        with pytest.raises(grpc.RpcError) as refused:
            webhook(server.url, "action_confirm_tool", nothing, token)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert responses(webhook(server.url, "action_confirm_tool", nothing, SERVER_TOKEN)) == [
        "utter_nothing_pending"
    ]

    before = notes_for(crm_db, DANA)
    saved, cancelled = f"grpc yes {uuid.uuid4().hex[:8]}", f"grpc no {uuid.uuid4().hex[:8]}"
    for note, answer, intent, expected in (
        (saved, "yes", "affirm", "utter_note_saved"),
        (cancelled, "no", "deny", "utter_note_cancelled"),
    ):
        tracker = FakeTracker(f"grpc-{uuid.uuid4().hex}", contact_email=DANA, note_text=note)
        tracker.user(f"log a call with {DANA}: {note}", "log_interaction", 0.97)
        asked = webhook(server.url, "action_log_interaction", tracker, SERVER_TOKEN)
        assert responses(asked) == ["utter_confirm_note"], asked
        tracker.apply("action_log_interaction", asked)
        assert isinstance(tracker.slots[PENDING_SLOT], dict)
        assert notes_for(crm_db, DANA) == [*before, *([saved] if note == cancelled else [])]
        tracker.user(answer, intent, 1.0)
        assert responses(webhook(server.url, "action_confirm_tool", tracker, SERVER_TOKEN)) == [expected]
    assert notes_for(crm_db, DANA) == [*before, saved]
    assert SERVER_TOKEN not in server.output() and saved not in server.output()


def test_grpc_start_up_checks_and_fail_closed_address(
    endpoints: Path, crm_rest: str, crm_mcp: str, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    text = (procs.EXAMPLE_BOT / "skills" / "log_interaction.yml").read_text()
    (skills / "log_interaction.yml").write_text(
        text.replace("utter_note_cancelled", "utter_no_such_response")
    )
    bad_skill = grpc_server(endpoints, crm_rest, crm_mcp, SKILLS_DIR=str(skills))
    result = subprocess.run(
        bad_skill.args, cwd=procs.EXAMPLE_BOT, env=bad_skill.env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "log_interaction.yml" in result.stderr and "utter_no_such_response" in result.stderr

    public = grpc_server(endpoints, crm_rest, crm_mcp, ACTION_SERVER_HOST="0.0.0.0")
    del public.env["ACTION_SERVER_TOKEN"]
    result = subprocess.run(
        public.args, cwd=procs.EXAMPLE_BOT, env=public.env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "ACTION_SERVER_TOKEN or TLS client certificates" in result.stderr
