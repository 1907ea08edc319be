"""The example bot as a small production deployment, on loopback: :class:`Cluster` starts it, acts on
one process of it (the fault test) and stops it. `make cluster-up` / `make cluster-down`
(scripts/cluster.py) run it in the background; the cluster test and the benchmarks' cluster line
run it in their own process.

What runs (every process on 127.0.0.1, every port free unless configured):

    person ─► nginx :rasa ─► Rasa server 1, 2 ── tracker store: PostgreSQL (database `rasa`)
                                  │               lock store:    Redis
                                  ▼
              nginx :actions ─► action server 1, 2 (shared CONFIRMATION_SECRET, token; their record:
                                  │                 PostgreSQL, database `mcp_bridge`)
              nginx :mcp ─────► CRM MCP server 1, 2 (stateless streamable HTTP, OAuth protected
                                  │                resource of the authorization server: oidc-provider)
                                CRM REST API ── CRM store: PostgreSQL (database `crm`)

    approver ─► approval page ─► nginx :actions (tell) ─► action server ─► nginx :rasa (trigger_intent)
                │  held calls: PostgreSQL (`mcp_bridge`), shared with the action servers
                └─ its sessions: Redis (db 2)

The action servers get their access tokens from the authorization server by client credentials
(each replica its own); MCP_AUTH=token keeps the static bearer token instead. MCP_AUTH=person makes
the bridge act as the person in the conversation (authorization code with PKCE): the authorization
server gets a second client (crm-bridge-person, its secret CRM_PERSON_CLIENT_SECRET) whose redirect
URI is the sign-in callback through nginx's action-server front, so the person's browser reaches
whichever replica answers; every action server keeps the people's tokens in the plugin's one
PostgreSQL database (`mcp_bridge`, its own role; beside the record and the approvals), encrypted under
one MCP_TOKEN_KEY, and resumes the conversation through
nginx's Rasa front (Rasa's HTTP API). A sign-in taken by one replica is used by the other, and
"disconnect my CRM" on one signs out on both.

Data, configuration, logs and secrets live in var/cluster/ (CLUSTER_VAR moves it). Secrets are
generated once into files there (mode 0600), or taken from the environment: CRM_OAUTH_CLIENT_SECRET
(the bridge's at the authorization server), CRM_MCP_TOKEN (with MCP_AUTH=token),
CRM_PERSON_CLIENT_SECRET and MCP_TOKEN_KEY (with MCP_AUTH=person),
ACTION_SERVER_TOKEN, CONFIRMATION_SECRET, MCP_BRIDGE_CHANNEL_KEY, RASA_AUTH_TOKEN, REST_CHANNEL_TOKEN
(the REST channel's bearer token, passed through nginx), CHAT_JWT_KEY. The nginx front ports can be fixed with
CLUSTER_RASA_PORT, CLUSTER_ACTIONS_PORT and CLUSTER_MCP_PORT.

The approval page (mcp_bridge/approvals/page.py, password logins) lets second approvers decide held
calls; its approvers are examples/crm_bot/approvers.yml's, each one's password APPROVER_<NAME>_PASSWORD
or generated once into var/cluster/approver_<name>_password (the page gets only scrypt hashes), its
sessions in Redis. It holds no Rasa token: it asks the action servers (through nginx) to tell a
decision to its conversation, with APPROVAL_TELL_TOKEN (var/cluster/approval_tell_token), and they
tell it through nginx's Rasa front (Rasa's HTTP API, RASA_AUTH_TOKEN).

`var/cluster/urls.json` says where to reach it (`rasa`: the REST channel's base URL through
nginx; `mcp`: the MCP endpoint through nginx; `metrics`: the action servers' metrics through
nginx; the secrets' file names; each replica's own address). scripts/install-services.sh
installs PostgreSQL, Redis and nginx (Debian packages).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from devstack import engines, services
from devstack.services import HOST, ServiceProcess, free_port

CALLBACK_PATH = "/mcp-bridge/oauth/callback"  # mcp_bridge.auth.person.CALLBACK_PATH
# MCP_AUTH: oauth (client credentials, the default), person (authorization code), token (static).
MCP_AUTH_MODES = ("oauth", "person", "token")

REPO = services.REPO_ROOT
APPROVERS = services.EXAMPLE_BOT / "approvers.yml"
DEFAULT_VAR = Path(os.environ.get("CLUSTER_VAR") or REPO / "var" / "cluster")
REPLICAS = 2
# How long a Rasa server's lock on a conversation outlives it when it dies holding the lock: the
# next message of that conversation waits at most this long. Far above one turn (about 0.1 s).
LOCK_LIFETIME_SECONDS = 20

# name -> (environment variable, file in var/cluster)
SECRETS = {
    "mcp_token": ("CRM_MCP_TOKEN", "crm_mcp_token"),
    "crm_api_token": ("CRM_API_TOKEN", "crm_api_token"),
    "oauth_client_secret": ("CRM_OAUTH_CLIENT_SECRET", "crm_oauth_client_secret"),
    "person_client_secret": ("CRM_PERSON_CLIENT_SECRET", "crm_person_client_secret"),
    "token_key": ("MCP_TOKEN_KEY", "mcp_token_key"),
    "action_token": ("ACTION_SERVER_TOKEN", "action_server_token"),
    "confirmation_secret": ("CONFIRMATION_SECRET", "confirmation_secret"),
    "rasa_auth_token": ("RASA_AUTH_TOKEN", "rasa_auth_token"),
    "rest_token": ("REST_CHANNEL_TOKEN", "rest_channel_token"),
    "chat_key": ("CHAT_JWT_KEY", "chat_jwt_key"),
    "channel_key": ("MCP_BRIDGE_CHANNEL_KEY", "channel_key"),
    "postgres_password": ("", "postgres_password"),
    "crm_db_password": ("", "crm_db_password"),
    "rasa_db_password": ("", "rasa_db_password"),
    "bridge_db_password": ("", "bridge_db_password"),
    "approval_page_key": ("APPROVAL_PAGE_KEY", "approval_page_key"),
    "tell_token": ("APPROVAL_TELL_TOKEN", "approval_tell_token"),
    "redis_password": ("", "redis_password"),
}


def _ports(count: int) -> list[int]:
    chosen: list[int] = []
    while len(chosen) < count:
        port = free_port()
        if port not in chosen:
            chosen.append(port)
    return chosen


class Cluster:
    """The whole deployment. `start()` brings it up; `kill(name)` / `restart(name)` act on one
    process (the fault test); `stop()` stops all of it, newest first.

    Names: postgres, redis, crm-rest, auth (with OAuth), mcp-1, mcp-2, action-1, action-2, nginx, rasa-1,
    rasa-2, approval-page.

    `approval_run_lease`: the action servers' APPROVAL_RUN_LEASE_SECONDS (None: the plugin's default).
    `rasa_replicas`: how many Rasa servers to start (0: none, nor the approval page; for tests that
    talk to the action servers themselves).
    """

    def __init__(
        self,
        var: Path = DEFAULT_VAR,
        *,
        detached: bool = False,
        durable: bool = True,
        approval_run_lease: float | None = None,
        rasa_replicas: int = REPLICAS,
    ) -> None:
        self.var = var.resolve()
        self.detached = detached
        self.logs = var / "log"
        self.secrets = {name: services.secret(var, *where) for name, where in SECRETS.items()}
        services.use_crm_api_token(self.secrets["crm_api_token"])
        self.model = services.current_model()
        # OAuth (the default) or the static token between the action servers and the MCP servers;
        # with "person", OAuth as the person in the conversation.
        self.mode = os.environ.get("MCP_AUTH") or "oauth"
        if self.mode not in MCP_AUTH_MODES:
            raise ValueError(f"MCP_AUTH={self.mode!r}: use one of {', '.join(MCP_AUTH_MODES)}")
        self.oauth = self.mode != "token"
        self.client = services.OAuthClient("crm-bridge", self.secrets["oauth_client_secret"])
        self.rasa_replicas = rasa_replicas
        self.approval_run_lease = approval_run_lease
        (self.pg_port, self.redis_port, self.rest_port, self.auth_port, self.approval_port, *rest) = _ports(
            5 + 3 * REPLICAS
        )
        self.mcp_ports = rest[:REPLICAS]
        self.action_ports = rest[REPLICAS : 2 * REPLICAS]
        self.rasa_ports = rest[2 * REPLICAS :]
        front = _ports(3)
        self.front = {
            "rasa": int(os.environ.get("CLUSTER_RASA_PORT") or front[0]),
            "actions": int(os.environ.get("CLUSTER_ACTIONS_PORT") or front[1]),
            "mcp": int(os.environ.get("CLUSTER_MCP_PORT") or front[2]),
        }
        self.postgres = engines.Postgres(var / "postgres", self.secrets["postgres_password"], durable=durable)
        # The action servers' interpreter (an action-server venv's); a (re)start uses the current one.
        self.action_python = sys.executable
        self.crm_database_url = ""
        # The plugin's database every action server and the approval page share: the action servers'
        # record, the calls held for a second approver, the people's tokens (MCP_AUTH=person).
        self.bridge_database_url = ""
        self.running: dict[str, ServiceProcess] = {}
        self._action_endpoints = self._rasa_endpoints_path = Path()
        self._lock = threading.Lock()

    # -- addresses ---------------------------------------------------------------------------

    @property
    def rasa_url(self) -> str:
        return f"http://{HOST}:{self.front['rasa']}"

    @property
    def mcp_url(self) -> str:
        return f"http://{HOST}:{self.front['mcp']}/mcp"

    @property
    def auth_url(self) -> str:
        return f"http://{HOST}:{self.auth_port}"

    @property
    def actions_url(self) -> str:
        return f"http://{HOST}:{self.front['actions']}"

    @property
    def person(self) -> services.PersonClient | None:
        """The bridge's client for acting as the person (MCP_AUTH=person): the sign-in comes back
        through nginx, to whichever action server answers."""
        if self.mode != "person":
            return None
        return services.PersonClient(
            "crm-bridge-person", self.secrets["person_client_secret"], f"{self.actions_url}{CALLBACK_PATH}"
        )

    @property
    def rasa_access(self) -> services.RasaAccess:
        """What the Rasa servers run with, and what a client of theirs needs."""
        return services.RasaAccess(
            rest_token=self.secrets["rest_token"],
            chat_key=self.secrets["chat_key"],
            api_token=self.secrets["rasa_auth_token"],
            channel_key=self.secrets["channel_key"],
        )

    def audit_log(self, replica: int) -> Path:
        return self.var / f"audit-action-{replica}.jsonl"

    @property
    def approval_page_url(self) -> str:
        return f"http://{HOST}:{self.approval_port}"

    def approver_passwords(self) -> dict[str, str]:
        """The example's approvers (approvers.yml) and their passwords."""
        names = yaml.safe_load(APPROVERS.read_text())["approvers"]
        return {
            name: services.secret(self.var, f"APPROVER_{name.upper()}_PASSWORD", f"approver_{name}_password")
            for name in names
        }

    def urls(self) -> dict[str, Any]:
        return {
            "rasa": self.rasa_url,
            "mcp": self.mcp_url,
            # The action servers' Prometheus metrics (same token rule as /webhook). Through nginx
            # this reaches one replica per scrape; a Prometheus scrapes each of `action_servers`.
            "metrics": f"{self.actions_url}/metrics",
            "action_webhook": f"{self.actions_url}/webhook",
            "rasa_servers": [f"http://{HOST}:{port}" for port in self.rasa_ports],
            "action_servers": [f"http://{HOST}:{port}" for port in self.action_ports],
            "mcp_servers": [f"http://{HOST}:{port}/mcp" for port in self.mcp_ports],
            "crm_rest": f"http://{HOST}:{self.rest_port}",
            **({"authorization_server": self.auth_url} if self.oauth else {}),
            "mcp_auth": self.mode,
            **({"sign_in_callback": self.person.redirect_uri} if self.person else {}),
            "postgres": f"postgresql://{HOST}:{self.pg_port}",
            "redis": f"redis://{HOST}:{self.redis_port}",
            "secrets": {
                "rasa_auth_token": str(self.var / SECRETS["rasa_auth_token"][1]),
                "rest_channel_token": str(self.var / SECRETS["rest_token"][1]),
                "action_server_token": str(self.var / SECRETS["action_token"][1]),
                "crm_mcp_token": str(self.var / SECRETS["mcp_token"][1]),
                "crm_oauth_client_secret": str(self.var / SECRETS["oauth_client_secret"][1]),
                "confirmation_secret": str(self.var / SECRETS["confirmation_secret"][1]),
                **(
                    {
                        "crm_person_client_secret": str(self.var / SECRETS["person_client_secret"][1]),
                        "mcp_token_key": str(self.var / SECRETS["token_key"][1]),
                    }
                    if self.person
                    else {}
                ),
            },
            "approval_page": self.approval_page_url,
            "audit_logs": [str(self.audit_log(i)) for i in range(1, REPLICAS + 1)],
            "logs": str(self.logs),
        }

    # -- configuration files -----------------------------------------------------------------

    def _rasa_endpoints(self) -> Path:
        """Rasa's endpoints: the action servers through nginx, PostgreSQL, Redis. Secrets stay
        `${VAR}` (unquoted, so Rasa fills them from its environment); the bridge's `mcp_servers`
        stay quoted, for Rasa to leave alone."""
        document = yaml.safe_load((services.EXAMPLE_BOT / "endpoints.yml").read_text())
        mcp_servers = yaml.safe_dump(
            {"mcp_servers": document.get("mcp_servers", [])}, default_style='"', sort_keys=False
        )
        text = f"""# Written by devstack/cluster.py for the cluster's Rasa servers.
action_endpoint:
  url: "{self.actions_url}/webhook"
  # In a header, not as ?token=: a URL's query ends up in access and error logs.
  headers:
    Authorization: Bearer ${{ACTION_SERVER_TOKEN}}
tracker_store:
  type: SQL
  dialect: postgresql
  url: {HOST}
  port: {self.pg_port}
  db: rasa
  username: rasa
  password: ${{RASA_DB_PASSWORD}}
lock_store:
  type: redis
  url: {HOST}
  port: {self.redis_port}
  password: ${{REDIS_PASSWORD}}
  db: 1
  key_prefix: cluster
{mcp_servers}"""
        path = self.var / "run" / "endpoints-rasa.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    # -- the processes -----------------------------------------------------------------------

    def _log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def _define(self) -> None:
        """Write the configuration files every (re)start of a process uses."""
        self._action_endpoints = services.write_endpoints(
            self.var / "run" / "endpoints-actions.yml",
            f"{self.actions_url}/webhook",
            mcp_oauth=self.oauth,
            mcp_person=self.person is not None,
        )
        self._rasa_endpoints_path = self._rasa_endpoints()

    def _service(self, name: str) -> ServiceProcess:
        """A new (not yet started) process for `name`, on that name's port."""
        crm_rest_url = f"http://{HOST}:{self.rest_port}"
        kind, _, number = name.rpartition("-")
        replica = int(number) if number.isdigit() else 0
        log_path, detached = self.logs / f"{name}.log", self.detached
        if name == "postgres":
            service = self.postgres.service(self.pg_port, log_path=log_path, detached=detached)
            service.stop_signal = signal.SIGINT  # "fast" shutdown; SIGTERM waits for every client
            return service
        if name == "redis":
            return engines.redis_server(
                self.var / "redis",
                self.secrets["redis_password"],
                self.redis_port,
                log_path=log_path,
                detached=detached,
            )
        if name == "crm-rest":
            return services.crm_rest(
                port=self.rest_port, database_url=self.crm_database_url, log_path=log_path, detached=detached
            )
        if name == "nginx":
            return engines.nginx_server(
                self.var / "nginx",
                {
                    # A request that reached a replica is never sent to another (a server that
                    # dies mid-request may have done part of it; the person, or the bridge under
                    # its idempotency key, says it again).
                    "rasa": (
                        self.front["rasa"],
                        [f"{HOST}:{p}" for p in self.rasa_ports[: self.rasa_replicas or REPLICAS]],
                    ),
                    "actions": (self.front["actions"], [f"{HOST}:{p}" for p in self.action_ports]),
                    "mcp": (self.front["mcp"], [f"{HOST}:{p}" for p in self.mcp_ports]),
                },
                log_path=log_path,
                detached=detached,
            )
        if name == "auth":
            # Tokens for the MCP servers as the action servers reach them: through nginx.
            return services.authorization_server(
                self.mcp_url,
                self.client,
                person=self.person,
                port=self.auth_port,
                log_path=log_path,
                detached=detached,
            )
        if kind == "mcp":
            return services.crm_mcp(
                crm_rest_url,
                token=None if self.oauth else self.secrets["mcp_token"],
                port=self.mcp_ports[replica - 1],
                stateless=True,
                issuer=self.auth_url if self.oauth else None,
                resource=self.mcp_url if self.oauth else None,
                log_path=log_path,
                detached=detached,
            )
        if kind == "action":
            return services.action_server(
                endpoints=self._action_endpoints,
                crm_url=crm_rest_url,
                mcp_url=self.mcp_url,
                mcp_token=None if self.oauth else self.secrets["mcp_token"],
                audit_log=self.audit_log(replica),
                port=self.action_ports[replica - 1],
                extra_env={
                    "ACTION_SERVER_TOKEN": self.secrets["action_token"],
                    "CONFIRMATION_SECRET": self.secrets["confirmation_secret"],
                    "MCP_BRIDGE_CHANNEL_KEY": self.secrets["channel_key"],
                    "MCP_BRIDGE_DATABASE": self.bridge_database_url,
                    # The approval page's decisions and the sign-in's resume go on through Rasa's API.
                    "APPROVAL_TELL_TOKEN": self.secrets["tell_token"],
                    "RASA_URL": self.rasa_url,
                    "RASA_AUTH_TOKEN": self.secrets["rasa_auth_token"],
                    **(
                        {"APPROVAL_RUN_LEASE_SECONDS": str(self.approval_run_lease)}
                        if self.approval_run_lease
                        else {}
                    ),
                    **(services.oauth_env(self.client, self.auth_url) if self.oauth else {}),
                    **self._person_env(),
                },
                log_path=log_path,
                detached=detached,
                python=self.action_python,
            )
        if kind == "rasa":
            return services.rasa_server(
                model=self.model,
                endpoints=self._rasa_endpoints_path,
                port=self.rasa_ports[replica - 1],
                access=self.rasa_access,
                extra_env={
                    "ACTION_SERVER_TOKEN": self.secrets["action_token"],
                    "RASA_DB_PASSWORD": self.secrets["rasa_db_password"],
                    "REDIS_PASSWORD": self.secrets["redis_password"],
                    "TICKET_LOCK_LIFETIME": str(LOCK_LIFETIME_SECONDS),
                    "SQLALCHEMY_SILENCE_UBER_WARNING": "1",
                    "PYTHONWARNINGS": "ignore",
                },
                log_path=log_path,
                detached=detached,
            )
        if name == "approval-page":
            return self._approval_page(log_path)
        raise KeyError(f"no process called {name!r} in the cluster")

    def _person_env(self) -> dict[str, str]:
        """An action server's settings for acting as the person (services.PERSON_OAUTH_BLOCK's
        variables and the tokens' key; Rasa's HTTP API, for the resume, is every action server's)."""
        person = self.person
        if person is None:
            return {}
        return {
            "CRM_PERSON_CLIENT_ID": person.client_id,
            "CRM_PERSON_CLIENT_SECRET": person.client_secret,
            "ACTION_SERVER_PUBLIC_URL": self.actions_url,
            "MCP_TOKEN_KEY": self.secrets["token_key"],
        }

    def _approval_page(self, log_path: Path) -> ServiceProcess:
        """The approval page, telling conversations through the action servers (nginx: whichever
        answers), its sessions in Redis (db 2; Rasa's lock store is db 1)."""
        from mcp_bridge.approvals.page import hash_password

        document = yaml.safe_load(APPROVERS.read_text())
        hashes, entries = {}, {}
        for name, password in self.approver_passwords().items():
            variable = f"APPROVER_{name.upper()}_PASSWORD_HASH"
            hashes[variable] = hash_password(password)
            entries[name] = {
                "roles": document["approvers"][name]["roles"],
                "password_hash": f"${{{variable}}}",
            }
        approvers = self.var / "run" / "approvers.yml"
        approvers.write_text(
            yaml.safe_dump({"approvers": entries, "people": document["people"]}, sort_keys=False)
        )
        return services.approval_page(
            actions_url=self.actions_url,
            tell_token=self.secrets["tell_token"],
            sessions=f"redis://:{self.secrets['redis_password']}@{HOST}:{self.redis_port}/2",
            page_key=self.secrets["approval_page_key"],
            approvers=approvers,
            database=self.bridge_database_url,
            audit_log=self.var / "audit-approval-page.jsonl",
            extra_env=hashes,
            port=self.approval_port,
            sweep_seconds=1.0,
            retry_seconds=5.0,
            log_path=log_path,
            detached=self.detached,
        )

    def _start(self, name: str) -> ServiceProcess:
        service = self._service(name)
        with self._lock:
            self.running[name] = service
        print(f"==> starting {name} ...", flush=True)
        service.start()
        return service

    def start(self) -> None:
        self.var.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self._define()
        try:
            self._start("postgres")
            self.crm_database_url = self.postgres.create_database(
                "crm", "crm", self.secrets["crm_db_password"]
            )
            self.postgres.create_database("rasa", "rasa", self.secrets["rasa_db_password"])
            self.bridge_database_url = self.postgres.create_database(
                "mcp_bridge", "mcp_bridge", self.secrets["bridge_db_password"]
            )
            self._start("redis")
            services.seed_db(database_url=self.crm_database_url)
            self._start("crm-rest")
            if self.oauth:
                self._start("auth")
            for i in range(1, REPLICAS + 1):
                self._start(f"mcp-{i}")
            for i in range(1, REPLICAS + 1):
                self._start(f"action-{i}")
            self._start("nginx")
            if self.rasa_replicas:
                self._start_rasa_servers()
                self._start("approval-page")
        except BaseException:
            self.stop()
            raise

    def _start_rasa_servers(self) -> None:
        """Both load their model at once; the second starts once the first has created the
        tracker store's table, so two servers never race to create it."""
        errors: list[BaseException] = []

        def run(name: str) -> None:
            try:
                self._start(name)
            except BaseException as exc:  # reported below, after both threads end
                errors.append(exc)

        first = threading.Thread(target=run, args=("rasa-1",))
        first.start()
        deadline = time.monotonic() + services.RASA_START_TIMEOUT
        while first.is_alive() and time.monotonic() < deadline and not self._tracker_table_exists():
            time.sleep(0.5)
        others = [threading.Thread(target=run, args=(f"rasa-{i}",)) for i in range(2, self.rasa_replicas + 1)]
        for thread in others:
            thread.start()
        for thread in [first, *others]:
            thread.join()
        if errors:
            raise errors[0]

    def _tracker_table_exists(self) -> bool:
        try:
            return (
                self.postgres.sql(["SELECT to_regclass('public.events')"], database="rasa").strip()
                == "events"
            )
        except RuntimeError:
            return False

    def kill(self, name: str) -> None:
        """SIGKILL: the process gets no chance to finish what it is doing."""
        self.running[name].kill()

    def restart(self, name: str) -> ServiceProcess:
        """Start `name` again on the same port, with the same configuration."""
        return self._start(name)

    def stop(self) -> None:
        for name in reversed(list(self.running)):
            service = self.running.pop(name)
            service.stop()
            print(f"stopped {name}", flush=True)

    # -- make cluster-up / cluster-down ---------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            name: {
                "pid": service.pid,
                "url": service.url,
                "stop_signal": int(service.stop_signal),
            }
            for name, service in self.running.items()
        }

    def table(self) -> str:
        lines = [f"  {'rasa (REST channel, via nginx)':<36} {self.rasa_url}/webhooks/rest/webhook"]
        lines.append(f"  {'mcp (via nginx)':<36} {self.mcp_url}")
        lines.append(f"  {'action servers (via nginx)':<36} {self.actions_url}/webhook")
        for name, service in self.running.items():
            lines.append(f"  {name:<36} {service.url}  (pid {service.pid})")
        return "\n".join(lines)
