"""The processes of the proof, on free ports on 127.0.0.1, and stopping every one of them.

One CRM REST API over a fresh seeded database, one CRM MCP server protected by OAuth (an
authorization server, oidc-provider, issues the action server's bridge its tokens by client
credentials, as `make up` does), a plain MCP server
named `archive` that serves no CRM tool, one Rasa server (started once: it is the slow one), and
one action server on a fixed port that is restarted with different skill files between phases,
so Rasa's action endpoint never changes. Where the action server's rasa-sdk traces (3.21), a trace
backend (Arize Phoenix) takes the spans of the action server and of the CRM MCP server, by OTLP, from
the ``tracing:`` block of the endpoints.yml Rasa reads too. With ``mantle`` ("mcp" or "local"), that
phase's skill files have the Mantle twin of log_interaction (skill.md and its sidecar) in place of its
YAML file.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from tests.live.proof import variants
from tests.support import procs
from tests.support.logged_stack import LoggedStack

ARCHIVE_SERVER = "archive"


class ProofStack(LoggedStack):
    def __init__(self, workdir: Path, action_python: str | None = None, mantle: str | None = None) -> None:
        super().__init__(workdir)
        # The phase ("mcp" or "local") whose log_interaction is the Mantle twin; None: neither.
        self.mantle = mantle
        # The action server's interpreter (another environment's, e.g. Rasa Pro's); this one's if None.
        self.action_python = action_python
        self.db = workdir / "crm.sqlite3"
        self.client = procs.OAuthClient("crm-bridge", secrets.token_urlsafe(24))
        self.auth: procs.ServiceProcess | None = None
        self.action_port = procs.free_port()
        # Rasa sends it to the action server, which refuses any request without it.
        self.action_token = secrets.token_urlsafe(32)
        self.crm: procs.ServiceProcess | None = None
        self.mcp: procs.ServiceProcess | None = None
        self.mcp_port = 0
        self.actions: procs.ServiceProcess | None = None
        self.endpoints = workdir / "endpoints.yml"
        self.skills: dict[str, Path] = {}
        # The audit trail's key, so `mcp-bridge audit verify` can check the chain afterwards.
        self.audit_key = secrets.token_urlsafe(32)
        # rasa-sdk 3.21 reads `tracing:` from its --endpoints file; 3.6 has no tracing.
        self.tracing = _has_tracing(action_python or sys.executable)
        self.traces: procs.ServiceProcess | None = None
        self.traces_grpc = procs.free_port()

    # -- helpers ----------------------------------------------------------------------------------

    @property
    def crm_url(self) -> str:
        assert self.crm is not None
        return self.crm.url

    @property
    def mcp_url(self) -> str:
        return f"http://{procs.HOST}:{self.mcp_port}/mcp"

    @property
    def auth_url(self) -> str:
        assert self.auth is not None
        return self.auth.url

    def access_token(self) -> str:
        """A token for the raw MCP client of the tool checks (the bridge gets its own, through the SDK)."""
        basic = base64.b64encode(f"{self.client.client_id}:{self.client.client_secret}".encode()).decode()
        form = {"grant_type": "client_credentials", "resource": self.mcp_url, "scope": self.client.scope}
        request = urllib.request.Request(
            f"{self.auth_url}/token",
            data=urllib.parse.urlencode(form).encode(),
            headers={"Authorization": f"Basic {basic}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.load(response)["access_token"])

    # -- start-up ---------------------------------------------------------------------------------

    def start_backends(self) -> None:
        """Seed the database, start the CRM, its MCP server and the archive server; write the files."""
        procs.seed_db(self.db)
        self.crm = self.start_logged(procs.crm_rest(self.db))
        self.mcp_port = procs.free_port()
        tracing = {"type": "otlp", "endpoint": self.otlp_endpoint, "insecure": True} if self.tracing else None
        self.auth = self.start_logged(procs.authorization_server(self.mcp_url, self.client))
        self.start_mcp()
        archive = self.start_logged(procs.plain_dict_mcp())
        action_url = f"http://{procs.HOST}:{self.action_port}/webhook"
        archive_entry = {"name": ARCHIVE_SERVER, "url": archive.url, "type": "http"}
        variants.write_endpoints(
            self.endpoints,
            action_url,
            [archive_entry],
            crm_oauth=procs.OAUTH_BLOCK,
            action_token=self.action_token,
            tracing=tracing,
        )
        self.skills = {
            phase: variants.write_skills(
                self.workdir / f"skills-{phase}", variants.every_tool(source), mantle=self.mantle == phase
            )
            for phase, source in (("mcp", "mcp:crm"), ("local", "local"))
        }
        self.skills |= {
            # The constrained tool is imported from a server that exists but does not serve it.
            "unresolvable": variants.write_skills(
                self.workdir / "skills-unresolvable",
                variants.overrides(
                    "local", {"log_interaction": {"add_timeline_note": f"mcp:{ARCHIVE_SERVER}"}}
                ),
            ),
        }

    def skill_format(self, phase: str) -> str:
        """How that phase's log_interaction is written: "skill.md" (the Mantle twin) or "YAML"."""
        return "skill.md" if self.mantle == phase else "YAML"

    # -- changes during the proof -----------------------------------------------------------------

    def use_skills(self, variant: str) -> procs.ServiceProcess:
        """(Re)start the action server on its fixed port with the skill files of ``variant``."""
        if self.actions is not None:
            self.actions.stop()
        self.actions = self.start_logged(
            procs.action_server(
                endpoints=self.endpoints,
                crm_url=self.crm_url,
                mcp_url=self.mcp_url,
                mcp_token=None,
                skills_dir=self.skills[variant],
                audit_log=self.workdir / f"audit-{variant}.jsonl",
                port=self.action_port,
                python=self.action_python,
                extra_env={
                    **procs.oauth_env(self.client, self.auth_url),
                    "ACTION_SERVER_TOKEN": self.action_token,
                    "AUDIT_KEY": self.audit_key,
                },
                args=["--endpoints", str(self.endpoints)] if self.tracing else (),
            )
        )
        return self.actions

    @property
    def otlp_endpoint(self) -> str:
        return f"{procs.HOST}:{self.traces_grpc}"

    def start_traces(self) -> None:
        """Start the trace backend (while Rasa loads), where the action server traces."""
        if self.tracing:
            self.traces = self.start_logged(
                procs.trace_backend(self.workdir / "traces", grpc_port=self.traces_grpc)
            )

    def stop_mcp(self) -> None:
        assert self.mcp is not None
        self.mcp.stop()

    def start_mcp(self) -> procs.ServiceProcess:
        """Start the CRM MCP server, on the same port every time."""
        otlp = self.otlp_endpoint if self.tracing else None
        self.mcp = self.start_logged(
            procs.crm_mcp(self.crm_url, port=self.mcp_port, issuer=self.auth_url, otlp_endpoint=otlp)
        )
        return self.mcp


def _has_tracing(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import rasa_sdk.tracing"], capture_output=True, timeout=120)
    return probe.returncode == 0
