"""Start the project's services as real processes on free local ports, and stop them again.

`ServiceProcess` runs a command, waits until it is ready (a readiness URL answers 200, or a check
of its own says so), and on stop sends SIGTERM (then SIGKILL after a grace period). Its combined
stdout/stderr goes to a file so a chatty process can never block on a full pipe, and is quoted
in every error. Used by `make up` and `make chat` (scripts/example_bot.py), `make cluster-up`
(devstack/cluster.py) and the tests (through tests/support/procs.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
# The example bot (its Rasa project, its actions and its CRM): its services run in this folder, as
# its owner would run them.
EXAMPLE_BOT = REPO_ROOT / "examples" / "crm_bot"
HOST = "127.0.0.1"
START_TIMEOUT = 20.0
STOP_TIMEOUT = 8.0


def _server_ports() -> tuple[int, int]:
    """The ports below the range the kernel hands to outgoing connections (``ip_local_port_range``):
    a port picked in that range can be taken by some client's connection before its server binds it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return (10000, low - 1) if low > 12000 else (1024, 65535)


_SERVER_PORTS = _server_ports()
_handed: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, drawn at random below the kernel's
    ephemeral range (so no outgoing connection takes it before its server binds) and never handed out
    twice by this process."""
    first, last = _SERVER_PORTS
    for _ in range(500):
        port = secrets.randbelow(last - first + 1) + first
        if port in _handed:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        _handed.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded machine: any port
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def secret(var: Path, variable: str, file_name: str) -> str:
    """The environment variable's value if set (`variable` may be ""), else a token generated once
    into var/<file_name> (mode 600) and read from there on every later start."""
    if variable and os.environ.get(variable):
        return os.environ[variable]
    path = var / file_name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, secrets.token_urlsafe(32))
    return path.read_text().strip()


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new file that is 0600 from the moment it exists (never readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state, ppid, ...), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[tuple[int, str]]:
    """Every process below `pid` (children, their children, ...) as (pid, start time), read from /proc.

    Taken before a service is stopped: once its main process is gone, what it leaves behind belongs
    to init and can no longer be found by parent."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            fields = _stat_fields(child)
            if fields is not None:
                found.append((child, fields[19]))  # field 22 of stat: start time, against pid reuse
                todo.append(child)
    return found


def end_processes(processes: list[tuple[int, str]], grace: float = 3.0) -> None:
    """SIGTERM each of `processes` (from `descendants`) that is still the same process, then SIGKILL
    what is left after `grace` seconds.

    A service's main process does not always take its children with it: rasa-sdk 3.21's Sanic 25
    leaves its multiprocessing manager and resource tracker behind on SIGTERM, and a SIGKILL of
    the main process leaves the worker that serves the port running."""

    def alive() -> list[int]:
        return [
            pid for pid, started in processes if (f := _stat_fields(pid)) and f[19] == started and f[0] != "Z"
        ]

    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        deadline = time.monotonic() + grace
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)


# The CRM REST API's bearer token (CRM_API_TOKEN), given to every service started here: the API
# requires it, its MCP server's tools and the action servers' local tools send it. One made for this
# process; the stack and the cluster set the one they keep in their var/ (use_crm_api_token).
_CRM_API_TOKEN = [secrets.token_urlsafe(32)]


def crm_api_token() -> str:
    return _CRM_API_TOKEN[0]


def use_crm_api_token(token: str) -> None:
    _CRM_API_TOKEN[0] = token


def mcp_server_python() -> str:
    """The Python the example CRM and the tests' MCP servers run on. They are written on mcp 2.3's
    MCPServer: this Python when it has it, and from Rasa Pro's environment (mcp 1.30, whose client is
    what runs there) the repository's .venv, as a bot there reaches a server someone else runs."""
    import importlib.util

    if importlib.util.find_spec("mcp.server.mcpserver") is not None:
        return sys.executable
    repository_venv = REPO_ROOT / ".venv" / "bin" / "python"
    if not repository_venv.exists():
        raise RuntimeError(f"this Python's mcp has no MCPServer and {repository_venv} is missing: make setup")
    return str(repository_venv)


def child_env(extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment without any CRM_* setting, plus CRM_API_TOKEN (:func:`crm_api_token`)
    and `extra` (a None value: that variable is not set in the child).

    Starting from a clean CRM_* slate keeps a developer's shell settings (a real token, the
    default database) out of the tests.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("CRM_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["CRM_API_TOKEN"] = crm_api_token()
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


class ServiceProcess:
    """One service process: `start()` returns once `ready_url` answers 200; `stop()` ends it."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        ready_url: str = "",
        ready_headers: Mapping[str, str] | None = None,
        ready_check: Callable[[], bool] | None = None,
        url: str,
        start_timeout: float = START_TIMEOUT,
        log_path: Path | None = None,
        detached: bool = False,
        user: str | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.cwd = cwd or EXAMPLE_BOT
        self.args = list(args)
        self.env = dict(env)
        self.ready_url = ready_url
        self.ready_headers = dict(ready_headers or {})
        self.ready_check = ready_check
        # Run as this system user (PostgreSQL refuses to run as root); None: as ourselves.
        self.user = user
        # How to ask it to stop; SIGKILL follows after STOP_TIMEOUT.
        self.stop_signal: signal.Signals = signal.SIGTERM
        self.url = url
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        # A detached process outlives this Python process (`make up`); its log stays where given.
        self.detached = detached
        self.keep_log = log_path is not None
        if log_path is None:
            fd, log_name = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
            os.close(fd)
            log_path = Path(log_name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path

    def output(self) -> str:
        """Everything the process wrote to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _failure(self, what: str) -> RuntimeError:
        return RuntimeError(
            f"{self.name}: {what}\ncommand: {' '.join(self.args)}\n--- output ---\n{self.output()}"
        )

    def _answers(self) -> bool:
        if self.ready_check is not None:
            return self.ready_check()
        request = urllib.request.Request(self.ready_url, headers=self.ready_headers)
        try:
            with urllib.request.urlopen(request, timeout=1.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def start(self) -> ServiceProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.args,
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.detached,
                user=self.user,
                group=self.user,
                # Not root's supplementary groups either: only the user's own.
                extra_groups=[] if self.user else None,
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.returncode = self.process.returncode
                raise self._failure(f"exited with code {self.returncode} before answering {self._ready_what}")
            if self._answers():
                return self
            time.sleep(0.05)
        self.stop()
        raise self._failure(f"did not answer {self._ready_what} within {self.start_timeout:.0f} s")

    @property
    def _ready_what(self) -> str:
        return self.ready_url or "its readiness check"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def stop(self) -> int | None:
        """`stop_signal` (SIGTERM), then SIGKILL after STOP_TIMEOUT; then whatever it left running
        (see `end_processes`). The exit code (None if never started)."""
        process, self.process = self.process, None
        if process is None:
            return self.returncode
        left = descendants(process.pid)
        if process.poll() is None:
            process.send_signal(self.stop_signal)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        end_processes(left)
        self.returncode = process.returncode
        return self.returncode

    def kill(self) -> None:
        """SIGKILL to the process and everything below it, at once, as when a machine or container
        dies: nothing gets a chance to finish what it is doing."""
        process, self.process = self.process, None
        if process is None:
            return
        left = descendants(process.pid)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        for pid, _ in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()
        end_processes(left)
        self.returncode = process.returncode

    def close(self) -> None:
        self.stop()
        if not self.keep_log:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> ServiceProcess:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def seed_db(db: Path | None = None, *, database_url: str | None = None) -> Path | None:
    """Create and seed a CRM database with `python -m crm seed`: the SQLite file `db`, or the
    PostgreSQL database at `database_url`. Returns `db`."""
    result = subprocess.run(
        [mcp_server_python(), "-m", "crm", "seed"],
        env=child_env({"CRM_DB": str(db) if db else None, "CRM_DATABASE_URL": database_url}),
        cwd=EXAMPLE_BOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"python -m crm seed failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )
    return db


def crm_rest(
    db: Path | None = None,
    port: int | None = None,
    *,
    database_url: str | None = None,
    log_path: Path | None = None,
    detached: bool = False,
) -> ServiceProcess:
    """A (not yet started) `python -m crm rest` over the SQLite file `db` or the PostgreSQL
    database at `database_url`; `.url` is its base URL."""
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    return ServiceProcess(
        "crm-rest",
        [mcp_server_python(), "-m", "crm", "rest", "--host", HOST, "--port", str(port)],
        env=child_env({"CRM_DB": str(db) if db else None, "CRM_DATABASE_URL": database_url}),
        ready_url=f"{base}/health",
        url=base,
        log_path=log_path,
        detached=detached,
    )


def crm_mcp(
    crm_url: str,
    *,
    token: str | None = None,
    port: int | None = None,
    stateless: bool = False,
    issuer: str | None = None,
    scope: str | None = None,
    audience: str | None = None,
    resource: str | None = None,
    otlp_endpoint: str | None = None,
    log_path: Path | None = None,
    detached: bool = False,
) -> ServiceProcess:
    """A (not yet started) `python -m crm mcp` whose tools call `crm_url`; `.url` ends in /mcp.

    `stateless`: every request stands alone (no MCP session), so any replica can answer it.
    `issuer`: an authorization server whose JWT access tokens (audience: `audience`, by default this
    server's URL; scope `scope`) the server accepts; then readiness is its protected-resource metadata.
    `resource`: the URL clients use, when not the server's own (a proxy in front of it).
    `otlp_endpoint`: an OTLP gRPC receiver (host:port) its spans go to, joining the caller's trace.
    """
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    return ServiceProcess(
        "crm-mcp",
        [mcp_server_python(), "-m", "crm", "mcp", "--host", HOST, "--port", str(port)],
        env=child_env(
            {
                "CRM_URL": crm_url,
                "CRM_MCP_TOKEN": token,
                "CRM_MCP_STATELESS": "1" if stateless else None,
                "CRM_MCP_ISSUER": issuer,
                "CRM_MCP_SCOPE": scope,
                "CRM_MCP_AUDIENCE": audience,
                "CRM_MCP_RESOURCE": resource,
                "CRM_OTLP_ENDPOINT": otlp_endpoint,
            }
        ),
        ready_url=f"{base}/.well-known/oauth-protected-resource/mcp" if issuer else f"{base}/stats",
        ready_headers={"Authorization": f"Bearer {token}"} if token else None,
        url=f"{base}/mcp",
        log_path=log_path,
        detached=detached,
    )


AUTH_SERVER = EXAMPLE_BOT / "auth"


@dataclass(frozen=True)
class OAuthClient:
    """The bridge's registration at the authorization server (client credentials)."""

    client_id: str
    client_secret: str
    scope: str = "crm.notes"


@dataclass(frozen=True)
class ApproverLogin:
    """The approval page as a client of the authorization server, and the approvers who log in
    there: ``{user: {"roles": [...], "password_hash": "scrypt$..."}}``."""

    client_id: str
    client_secret: str
    redirect_uri: str
    approvers: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class PersonClient:
    """The bridge's registration for acting as the person (authorization code with PKCE), and the
    people who may sign in (oidc-provider's development login page; any password)."""

    client_id: str
    client_secret: str
    redirect_uri: str
    accounts: tuple[str, ...] = ("dana-agent", "lee-agent")


def authorization_server(
    resource: str,
    client: OAuthClient,
    *,
    person: PersonClient | None = None,
    port: int | None = None,
    token_ttl: int = 600,
    jwks_file: Path | None = None,
    login: ApproverLogin | None = None,
    log_path: Path | None = None,
    detached: bool = False,
) -> ServiceProcess:
    """A (not yet started) oidc-provider (examples/crm_bot/auth/server.mjs) that issues `client`
    JWT access tokens for `resource` (the CRM MCP URL, their audience) lasting `token_ttl` s;
    `.url` is its issuer. `jwks_file`: a private JWKS to sign with (else a key made at start).
    `login`: approvers log in there too, for the approval page (its client and their hashes).
    Needs `npm ci` in examples/crm_bot/auth (`make setup`)."""
    if not (AUTH_SERVER / "node_modules" / "oidc-provider").is_dir():
        raise RuntimeError(f"{AUTH_SERVER}/node_modules is missing: run `make setup` (npm ci there)")
    port = port or free_port()
    issuer = f"http://{HOST}:{port}"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AUTH_", "CRM_"))}
    env.update(
        AUTH_ISSUER=issuer,
        AUTH_PORT=str(port),
        AUTH_RESOURCE=resource,
        AUTH_CLIENT_ID=client.client_id,
        AUTH_CLIENT_SECRET=client.client_secret,
        AUTH_SCOPE=client.scope,
        AUTH_TOKEN_TTL=str(token_ttl),
    )
    if jwks_file is not None:
        env["AUTH_JWKS_FILE"] = str(jwks_file)
    if login is not None:
        env.update(
            AUTH_LOGIN_CLIENT_ID=login.client_id,
            AUTH_LOGIN_CLIENT_SECRET=login.client_secret,
            AUTH_LOGIN_REDIRECT_URI=login.redirect_uri,
            AUTH_APPROVERS=json.dumps(login.approvers),
        )
    if person is not None:
        env.update(
            AUTH_PERSON_CLIENT_ID=person.client_id,
            AUTH_PERSON_CLIENT_SECRET=person.client_secret,
            AUTH_PERSON_REDIRECT_URI=person.redirect_uri,
            AUTH_ACCOUNTS=" ".join(person.accounts),
        )
    return ServiceProcess(
        "authorization-server",
        ["node", "server.mjs"],
        env=env,
        ready_url=f"{issuer}/.well-known/openid-configuration",
        url=issuer,
        log_path=log_path,
        detached=detached,
        cwd=AUTH_SERVER,
    )


def base_url(mcp_url: str) -> str:
    """`http://host:port` of an MCP endpoint URL such as `http://host:port/mcp`."""
    return mcp_url.rsplit("/", 1)[0]


class Services:
    """Starts services on demand and stops all of them in `close()` (newest first)."""

    def __init__(self) -> None:
        self._started: list[ServiceProcess] = []

    def start(self, service: ServiceProcess) -> ServiceProcess:
        self._started.append(service)
        return service.start()

    def close(self) -> None:
        while self._started:
            self._started.pop().close()


RASA = REPO_ROOT / ".venv-rasa" / "bin" / "rasa"
RASA_PYTHON = REPO_ROOT / ".venv-rasa" / "bin" / "python"
# `rasa` with its HTTP API token read from the environment instead of the command line.
RASA_RUN = REPO_ROOT / "scripts" / "rasa_run.py"
RASA_START_TIMEOUT = 240.0
# Shared by every Rasa server and action server a test starts, as one deployment's share one key.
TEST_CHANNEL_KEY = "test-only-channel-key-3f8a1c6e9b2d4705c1e8"
# The CONFIRMATION_SECRET of every action server a test starts (a test may forge with it: whoever holds
# it is one of the attackers the action server's record defends against).
TEST_CONFIRMATION_SECRET = "test-only confirmation secret: 9f2c41d7e0b3a865"


@dataclass(frozen=True)
class RasaAccess:
    """The secrets a Rasa server of this project runs with (credentials.yml names the variables).

    Every one goes to Rasa in its environment, never on its command line: ``rest_token`` guards the
    REST channel (REST_CHANNEL_TOKEN), ``chat_key`` signs the chat page's tokens for the socket.io
    channel (CHAT_JWT_KEY, shared with the chat page's server), ``api_token`` guards Rasa's HTTP API
    (its --auth-token, RASA_AUTH_TOKEN). ``page_origins`` are the chat pages allowed to connect.
    ``channel_key`` (MCP_BRIDGE_CHANNEL_KEY) signs who sent each message; every action server a test
    starts checks it (:func:`action_server` gives them the same value).
    """

    rest_token: str
    chat_key: str
    api_token: str
    page_origins: tuple[str, ...] = ()
    # The key the channels sign who sent each message with; the action servers check it.
    channel_key: str = TEST_CHANNEL_KEY

    @classmethod
    def generate(cls, page_origins: Sequence[str] = ()) -> RasaAccess:
        rest_token, chat_key, api_token = (secrets.token_urlsafe(32) for _ in range(3))
        return cls(rest_token, chat_key, api_token, page_origins=tuple(page_origins))

    def env(self) -> dict[str, str]:
        env = {
            "REST_CHANNEL_TOKEN": self.rest_token,
            "CHAT_JWT_KEY": self.chat_key,
            "RASA_AUTH_TOKEN": self.api_token,
            "MCP_BRIDGE_CHANNEL_KEY": self.channel_key,
        }
        if self.page_origins:
            env["CHAT_PAGE_ORIGINS"] = " ".join(self.page_origins)
        return env

    def rest_headers(self) -> dict[str, str]:
        """The header the REST channel requires."""
        return {"Authorization": f"Bearer {self.rest_token}"}


def page_origins(port: int) -> tuple[str, ...]:
    """The origins a chat page on this port of the loopback has, as a browser names them."""
    return (f"http://{HOST}:{port}", f"http://localhost:{port}")


def current_model() -> Path:
    """The trained model for the current domain, config and data (`make train` builds it)."""
    out = subprocess.run(
        [str(REPO_ROOT / "scripts" / "model-path.sh")], capture_output=True, text=True, check=True
    )
    model = REPO_ROOT / out.stdout.strip()
    if not model.exists():
        raise RuntimeError(f"{model} does not exist: run `make train` first")
    return model


# The crm server's oauth block in a generated endpoints.yml: the values come from the environment.
OAUTH_BLOCK = {
    "client_id": "${CRM_OAUTH_CLIENT_ID}",
    "client_secret": "${CRM_OAUTH_CLIENT_SECRET}",
    "token_url": "${CRM_OAUTH_TOKEN_URL}",
    "scope": "crm.notes",
}


def oauth_env(client: OAuthClient, issuer: str) -> dict[str, str]:
    """The variables OAUTH_BLOCK reads, for the action server (oidc-provider's token endpoint)."""
    return {
        "CRM_OAUTH_CLIENT_ID": client.client_id,
        "CRM_OAUTH_CLIENT_SECRET": client.client_secret,
        "CRM_OAUTH_TOKEN_URL": f"{issuer}/token",
    }


# The crm server's oauth block when it acts as the person (authorization code; the person signs in).
PERSON_OAUTH_BLOCK = {
    "grant": "authorization_code",
    "client_id": "${CRM_PERSON_CLIENT_ID}",
    "client_secret": "${CRM_PERSON_CLIENT_SECRET}",
    "scope": "crm.notes",
    "redirect_uri": "${ACTION_SERVER_PUBLIC_URL}/mcp-bridge/oauth/callback",
}


def write_endpoints(
    path: Path,
    action_url: str,
    action_token: str | None = None,
    *,
    mcp_oauth: bool = False,
    mcp_person: bool = False,
) -> Path:
    """endpoints.yml for Rasa and the action server, with the action endpoint at `action_url`.

    With `action_token`, Rasa sends it to the action server in an `Authorization: Bearer` header, never
    as `?token=...` in a URL (which ends up in logs); the file then holds a secret and is 0600.
    `mcp_oauth`: the crm server authenticates with OAuth client credentials (OAUTH_BLOCK) instead of
    the static token; `mcp_person`: it acts as the person in the conversation (PERSON_OAUTH_BLOCK).
    """
    import yaml

    document = yaml.safe_load((EXAMPLE_BOT / "endpoints.yml").read_text())
    document["action_endpoint"] = {"url": action_url}
    if action_token:
        document["action_endpoint"]["headers"] = {"Authorization": f"Bearer {action_token}"}
    if mcp_oauth or mcp_person:
        for server in document["mcp_servers"]:
            if server["name"] == "crm":
                server.pop("api_key", None)
                server["oauth"] = dict(PERSON_OAUTH_BLOCK if mcp_person else OAUTH_BLOCK)
    # Quoted throughout, so Rasa leaves ${...} for the bridge to expand.
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(document, default_style='"', sort_keys=False)
    replacement = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    replacement.unlink(missing_ok=True)
    write_private(replacement, text)
    os.replace(replacement, path)
    return path


# Before 0.4.0 the approvals and the tokens each had a database (mcp_bridge.record.database.FORMER_ENV).
FORMER_DATABASE_NAMES = ("APPROVALS_DATABASE", "MCP_TOKEN_STORE")


def action_server(
    *,
    endpoints: Path,
    crm_url: str,
    mcp_url: str,
    mcp_token: str | None,
    skills_dir: Path | None = None,
    audit_log: Path | None = None,
    port: int | None = None,
    log_path: Path | None = None,
    detached: bool = False,
    extra_env: Mapping[str, str | None] | None = None,
    python: str | None = None,
    database: Path | str | None = None,
    args: Sequence[str] = (),
) -> ServiceProcess:
    """A (not yet started) `python -m rasa_sdk --actions actions`; `.url` is its /webhook URL.

    `python`: the interpreter (an action-server venv's); this process's own by default. `database`: the
    plugin's database (its record, approvals and tokens), as MCP_BRIDGE_DATABASE: by default a file next
    to the audit trail (so a server started again on the same folder has the same record, as after a
    restart), else one of its own; none when `extra_env` names it itself (MCP_BRIDGE_DATABASE, or a
    former name: APPROVALS_DATABASE, MCP_TOKEN_STORE). `args`: more of rasa_sdk's options (rasa-sdk
    3.21's `--endpoints FILE`, whose `tracing:` it reads)."""
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    named = any((extra_env or {}).get(name) for name in ("MCP_BRIDGE_DATABASE", *FORMER_DATABASE_NAMES))
    if database is None and not named:
        folder = Path(audit_log).parent if audit_log else Path(tempfile.mkdtemp(prefix="action-server-"))
        database = folder / "mcp_bridge.sqlite3"
    env = child_env(
        {
            "MCP_BRIDGE_DATABASE": str(database) if database is not None else None,
            "ACTION_SERVER_HOST": HOST,
            "ACTION_SERVER_PORT": str(port),
            "ENDPOINTS": str(endpoints),
            "SKILLS_DIR": str(skills_dir or EXAMPLE_BOT / "skills"),
            "CRM_URL": crm_url,
            "CRM_MCP_URL": mcp_url,
            "CRM_MCP_TOKEN": mcp_token,
            "AUDIT_LOG": str(audit_log) if audit_log else None,
            # Shared by every action server a test starts, as replicas of one deployment share it.
            "CONFIRMATION_SECRET": TEST_CONFIRMATION_SECRET,
            "MCP_BRIDGE_CHANNEL_KEY": TEST_CHANNEL_KEY,
            **(extra_env or {}),
        }
    )
    return ServiceProcess(
        "action-server",
        [python or sys.executable, "-m", "rasa_sdk", "--actions", "actions", "--port", str(port), *args],
        env=env,
        ready_url=f"{base}/health",
        url=f"{base}/webhook",
        log_path=log_path,
        detached=detached,
        start_timeout=60.0,
    )


def rasa_server(
    *,
    model: Path,
    endpoints: Path,
    access: RasaAccess,
    port: int | None = None,
    log_path: Path | None = None,
    detached: bool = False,
    extra_env: Mapping[str, str] | None = None,
    credentials: Path | None = None,
) -> ServiceProcess:
    """A (not yet started) `rasa run --enable-api` on 127.0.0.1 with the channels of credentials.yml
    (REST with a bearer token, the chat page's signed socket.io; `credentials` names another file);
    `.url` is its base.

    Rasa's HTTP API (trackers, /model/parse, /status) requires `?token=<access.api_token>`; the REST
    channel `Authorization: Bearer <access.rest_token>`. No secret is on the command line.
    """
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    args = [str(RASA_PYTHON), str(RASA_RUN), "run", "--enable-api", "--model", str(model)]
    credentials = credentials or EXAMPLE_BOT / "credentials.yml"
    args += ["--endpoints", str(endpoints), "--credentials", str(credentials)]
    args += ["-i", HOST, "-p", str(port)]
    return ServiceProcess(
        "rasa-server",
        args,
        # The channels of credentials.yml are the plugin's (mcp_bridge.channels), taken from this
        # checkout; a deployment installs the plugin into Rasa's environment instead.
        env=child_env(
            {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO_ROOT), **(extra_env or {}), **access.env()}
        ),
        # Rasa loads its model before it listens, so any answer means ready; the root route needs
        # no token (a token in this URL would end up in error messages).
        ready_url=f"{base}/",
        url=base,
        log_path=log_path,
        detached=detached,
        start_timeout=RASA_START_TIMEOUT,
    )


CHAT_PAGE = REPO_ROOT / "devstack" / "chat_page.py"
# The trace backend (Arize Phoenix, from PyPI: scripts/install-trace-backend.sh makes this venv).
TRACES_VENV = REPO_ROOT / ".venv-traces"


def trace_backend(
    workdir: Path,
    *,
    grpc_port: int,
    port: int | None = None,
    log_path: Path | None = None,
    detached: bool = False,
) -> ServiceProcess:
    """A (not yet started) trace backend on 127.0.0.1: Arize Phoenix, which takes OTLP over gRPC (as
    Jaeger and the OpenTelemetry Collector do, on `grpc_port`: endpoints.yml's `tracing:` endpoint) and
    shows the traces in its web UI and REST API (`.url`); its data in `workdir`. Nothing leaves the
    machine: its telemetry and external resources are off."""
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    return ServiceProcess(
        "trace-backend",
        [str(TRACES_VENV / "bin" / "phoenix"), "serve"],
        env={
            **{key: value for key, value in os.environ.items() if not key.startswith(("PHOENIX_", "OTEL_"))},
            "PHOENIX_HOST": HOST,
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_WORKING_DIR": str(workdir),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            "PHOENIX_ENABLE_MCP_SERVER": "false",
        },
        ready_url=f"{base}/healthz",
        url=base,
        log_path=log_path,
        detached=detached,
        start_timeout=90.0,
    )


def chat_page(
    *,
    rasa_url: str,
    chat_key: str,
    port: int | None = None,
    no_answer_seconds: float | None = None,
    token_seconds: int | None = None,
    log_path: Path | None = None,
    detached: bool = False,
) -> ServiceProcess:
    """A (not yet started) devstack/chat_page.py talking to the Rasa server at `rasa_url`, signing the
    browser's tokens with `chat_key` (the Rasa server's CHAT_JWT_KEY), each good for `token_seconds`
    (the page's default: 120); `.url` ends in /."""
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    args = [sys.executable, str(CHAT_PAGE), "--rasa-url", rasa_url, "--host", HOST, "--port", str(port)]
    if no_answer_seconds is not None:
        args += ["--no-answer-seconds", str(no_answer_seconds)]
    if token_seconds is not None:
        args += ["--token-seconds", str(token_seconds)]
    return ServiceProcess(
        "chat-page",
        args,
        env=child_env({"CHAT_JWT_KEY": chat_key}),
        ready_url=f"{base}/health",
        url=f"{base}/",
        log_path=log_path,
        detached=detached,
    )


def approval_page(
    *,
    actions_url: str,
    tell_token: str,
    page_key: str,
    approvers: Path,
    database: str,
    audit_log: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
    port: int | None = None,
    sweep_seconds: float | None = None,
    retry_seconds: float | None = None,
    oidc: tuple[str, ApproverLogin] | None = None,
    sessions: str | None = None,
    log_path: Path | None = None,
    detached: bool = False,
) -> ServiceProcess:
    """A (not yet started) approval page (`mcp-bridge approval-page`): second approvers decide held
    calls there, and the requester's conversation is told by the action server at `actions_url` (the
    page's APPROVAL_TELL_TOKEN `tell_token`, the action servers' too). Its environment holds no secret
    that writes to a conversation (the page refuses to start with one): those of this process's are
    left out. `extra_env`: the approvers' password hashes the approvers file names. `oidc`: log
    approvers in at this issuer instead, as this client (`port` must be the one its redirect URI
    names). `sessions`: APPROVAL_PAGE_SESSIONS (a redis:// URL; default: the database).
    `.url` ends in /."""
    port = port or free_port()
    base = f"http://{HOST}:{port}"
    args = [
        sys.executable,
        "-m",
        "mcp_bridge.approvals.page",
        "--actions-url",
        actions_url,
        "--approvers",
        str(approvers),
    ]
    args += ["--host", HOST, "--port", str(port)]
    if sweep_seconds is not None:
        args += ["--sweep-seconds", str(sweep_seconds)]
    if retry_seconds is not None:
        args += ["--retry-seconds", str(retry_seconds)]
    oidc_env = {}
    if oidc is not None:
        issuer, login = oidc
        args += ["--oidc-issuer", issuer, "--public-url", base]
        oidc_env = {"OIDC_CLIENT_ID": login.client_id, "OIDC_CLIENT_SECRET": login.client_secret}
    env = {
        "PYTHONPATH": str(REPO_ROOT),
        "APPROVAL_TELL_TOKEN": tell_token,
        "APPROVAL_PAGE_KEY": page_key,
        "MCP_BRIDGE_DATABASE": database,
        "APPROVALS_DATABASE": None,
        "APPROVAL_PAGE_SESSIONS": sessions,
        "AUDIT_LOG": str(audit_log) if audit_log else None,
        **oidc_env,
        **(extra_env or {}),
    }
    from mcp_bridge.approvals.page import CONVERSATION_SECRETS

    page_env = child_env(env)
    for name in CONVERSATION_SECRETS:
        page_env.pop(name, None)
    return ServiceProcess(
        "approval-page",
        args,
        env=page_env,
        ready_url=f"{base}/health",
        url=f"{base}/",
        log_path=log_path,
        detached=detached,
        cwd=REPO_ROOT,
    )
