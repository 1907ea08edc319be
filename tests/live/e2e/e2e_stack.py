"""The CRM bot's processes for its conversation tests, on free ports on 127.0.0.1.

One CRM REST API over a fresh seeded database, one CRM MCP server (stoppable and restartable on
its port) as an OAuth protected resource, the authorization server (oidc-provider) that issues the
action server's bridge its tokens by client credentials (as `make up` and the live proof run it),
one Rasa server (the slow one: started once, in the background, while the rest starts),
one action server on a fixed port, restarted with another variant of the bot between runs so
Rasa's action endpoint never changes, and the approval page (`mcp-bridge approval-page`, password
logins) on the approval store the action server uses. A variant is a skills folder, plus optionally a
folder holding a modified copy of the `actions` package.

The approvers: sam (supervisor), operator (supervisor: the name the REST channel gives the requester,
so their own requests are theirs), carol (clerk); their passwords are made per run and handed to
`mcp-bridge test e2e` as APPROVER_<NAME>_PASSWORD.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mcp_bridge.approvals.page import hash_password
from tests.support import procs
from tests.support.conversation import skills_with_source
from tests.support.logged_stack import LoggedStack

APPROVERS = {"sam": "supervisor", "operator": "supervisor", "carol": "clerk"}
# The approval expiry of the short_approvals variant.
SHORT_EXPIRY = "3s"


@dataclass(frozen=True)
class Variant:
    name: str
    skills: Path
    # A folder with an `actions` package that shadows the repository's (None: the real one).
    actions_root: Path | None = None


class E2EStack(LoggedStack):
    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.db = workdir / "crm.sqlite3"
        self.client = procs.OAuthClient("crm-bridge", secrets.token_urlsafe(24))
        self.action_port = procs.free_port()
        self.mcp_port = procs.free_port()
        self.endpoints = workdir / "endpoints.yml"
        self.approvals_db = workdir / "approvals.sqlite3"
        self.passwords = {name: secrets.token_urlsafe(12) for name in APPROVERS}
        # The approval page's token at the action server (APPROVAL_TELL_TOKEN).
        self.tell_token = secrets.token_urlsafe(32)
        self.page: procs.ServiceProcess | None = None
        self.crm: procs.ServiceProcess | None = None
        self.mcp: procs.ServiceProcess | None = None
        self.auth: procs.ServiceProcess | None = None
        self.actions: procs.ServiceProcess | None = None
        self.variant: Variant | None = None

    # -- variants -------------------------------------------------------------------------------

    def mcp_tools(self) -> Variant:
        return Variant("mcp", skills_with_source(self.workdir / "skills-mcp", "mcp:crm"))

    def local_tools(self) -> Variant:
        return Variant("local", skills_with_source(self.workdir / "skills-local", "local"))

    def short_approvals(self) -> Variant:
        """Over MCP tools, with the log skill's approvals expiring after SHORT_EXPIRY."""
        skills = skills_with_source(self.workdir / "skills-short-approvals", "mcp:crm")
        path = skills / "log_interaction.yml"
        text = path.read_text()
        if "expires_after: 30m" not in text:
            raise RuntimeError(f"{path}: no 'expires_after: 30m' to shorten; has the skill file changed?")
        path.write_text(text.replace("expires_after: 30m", f"expires_after: {SHORT_EXPIRY}"))
        return Variant("short-approvals", skills)

    def audit_log(self, variant: Variant) -> Path:
        return self.workdir / f"audit-{variant.name}.jsonl"

    # -- start-up ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start loading Rasa in the background, then the CRM and its MCP server (see wait_for_rasa)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        procs.write_endpoints(
            self.endpoints, f"http://{procs.HOST}:{self.action_port}/webhook", mcp_oauth=True
        )
        self.start_rasa_in_background(self.endpoints)
        procs.seed_db(self.db)
        self.crm = self.start_logged(procs.crm_rest(self.db))
        self.auth = self.start_logged(procs.authorization_server(self.mcp_url, self.client))
        self.start_mcp()
        self.page = self.start_logged(self._approval_page())

    def _approval_page(self) -> procs.ServiceProcess:
        assert self.rasa is not None  # its URL is known before it has loaded
        approvers = self.workdir / "approvers.yml"
        approvers.write_text(
            "approvers:\n"
            + "".join(
                f'  {name}: {{roles: [{role}], password_hash: "${{HASH_{name.upper()}}}"}}\n'
                for name, role in APPROVERS.items()
            )
            # Who is who: each approver is the REST channel's user of the same name ("rest:operator",
            # the requester of the cases, is the approver operator: their own requests are refused).
            + "people:\n"
            + "".join(f'  {name}: {{chat: ["rest:{name}"], approval_page: [{name}]}}\n' for name in APPROVERS)
        )
        return procs.approval_page(
            actions_url=f"http://{procs.HOST}:{self.action_port}",
            tell_token=self.tell_token,
            page_key=secrets.token_urlsafe(32),
            approvers=approvers,
            database=str(self.approvals_db),
            audit_log=self.workdir / "audit-approval-page.jsonl",
            sweep_seconds=0.5,
            extra_env={f"HASH_{name.upper()}": hash_password(p) for name, p in self.passwords.items()},
        )

    def tell_env(self) -> dict[str, str]:
        """What an action server needs to tell the approval page's decisions to their conversations."""
        assert self.rasa is not None
        return {
            "APPROVAL_TELL_TOKEN": self.tell_token,
            "RASA_URL": self.rasa.url,
            "RASA_AUTH_TOKEN": self.access.api_token,
        }

    @property
    def approval_page_url(self) -> str:
        assert self.page is not None
        return self.page.url

    def approver_env(self) -> Mapping[str, str]:
        return {f"APPROVER_{name.upper()}_PASSWORD": password for name, password in self.passwords.items()}

    @property
    def mcp_url(self) -> str:
        return f"http://{procs.HOST}:{self.mcp_port}/mcp"

    @property
    def rasa_url(self) -> str:
        assert self.rasa is not None
        return self.rasa.url

    def command_env(self) -> dict[str, str]:
        """The environment for `mcp-bridge test e2e` against this stack: its tokens (never arguments)."""
        return procs.child_env(
            {
                "RASA_AUTH_TOKEN": self.access.api_token,
                "REST_CHANNEL_TOKEN": self.access.rest_token,
                **self.approver_env(),
            }
        )

    def use(self, variant: Variant) -> procs.ServiceProcess:
        """(Re)start the action server on its fixed port as ``variant``."""
        assert self.crm is not None and self.auth is not None
        if self.actions is not None:
            self.actions.stop()
        server = procs.action_server(
            endpoints=self.endpoints,
            crm_url=self.crm.url,
            mcp_url=self.mcp_url,
            mcp_token=None,
            skills_dir=variant.skills,
            audit_log=self.audit_log(variant),
            port=self.action_port,
            extra_env={
                **procs.oauth_env(self.client, self.auth.url),
                "APPROVALS_DATABASE": str(self.approvals_db),
                **self.tell_env(),
            },
        )
        if variant.actions_root is not None:
            # `python -m rasa_sdk --actions actions` would find the repository's package first (the
            # working directory leads sys.path); run the same module with the copy's folder in front.
            module = server.args.index("-m")
            launch = f"import sys, runpy; sys.path.insert(0, {str(variant.actions_root)!r}); "
            launch += f"runpy.run_module({server.args[module + 1]!r}, run_name='__main__', alter_sys=True)"
            server.args = [sys.executable, "-c", launch, *server.args[module + 2 :]]
        self.actions = self.start_logged(server)
        self.variant = variant
        return self.actions

    def stop_mcp(self) -> None:
        assert self.mcp is not None
        self.mcp.stop()

    def start_mcp(self) -> None:
        assert self.crm is not None and self.auth is not None
        self.mcp = self.start_logged(procs.crm_mcp(self.crm.url, port=self.mcp_port, issuer=self.auth.url))
