"""Stopping or killing a service ends every process it started, not only its main one.

rasa-sdk 3.21 runs Sanic 25, which serves from a worker process and keeps a multiprocessing
manager and resource tracker beside it. Ended by SIGTERM, the main process left those two running;
ended by SIGKILL (the cluster test's fault), it left the worker serving the port, so the "killed"
action server went on answering.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from devstack.services import descendants
from tests.support import procs


def _action_server(tmp_path: Path, crm_rest: str, crm_mcp: str) -> procs.ServiceProcess:
    endpoints = procs.write_endpoints(tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook")
    return procs.action_server(
        endpoints=endpoints,
        crm_url=crm_rest,
        mcp_url=crm_mcp,
        mcp_token="test-token-of-the-crm-mcp-server-5Fx2Nw",
    )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_nothing_of_an_action_server_outlives_it(
    tmp_path: Path, crm_rest: str, crm_mcp: str, how: str
) -> None:
    server = _action_server(tmp_path, crm_rest, crm_mcp)
    with server:
        assert server.process is not None
        below = descendants(server.process.pid)
        health = server.ready_url
        if how == "kill":
            server.kill()
        else:
            server.stop()
        left = [pid for pid, started in below if _same(pid, started)]
        assert left == [], f"still running after {how}: {left}"
        assert not _answers(health)


def _same(pid: int, started: str) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == started and fields[0] != "Z"


def test_an_api_token_that_starts_with_a_dash_reaches_rasa_as_the_token(tmp_path: Path) -> None:
    """secrets.token_urlsafe starts one token in 64 with "-": Rasa must take it as the token's value,
    not as an option (it refused to start: "--auth-token: expected one argument")."""
    access = procs.RasaAccess.generate()
    access = procs.RasaAccess(access.rest_token, access.chat_key, "-" + access.api_token)
    endpoints = procs.write_endpoints(tmp_path / "endpoints.yml", "http://127.0.0.1:1/webhook")
    with procs.rasa_server(model=procs.current_model(), endpoints=endpoints, access=access) as rasa:
        assert _status(f"{rasa.url}/status?token={access.api_token}") == 200
        assert _status(f"{rasa.url}/status?token=wrong") == 401
        assert access.api_token not in rasa.output()  # never printed


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
