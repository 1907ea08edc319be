"""`make up` / `make down` (and `make chat`): the example bot's services in the background on
127.0.0.1, and stopping them again.

    python scripts/example_bot.py up [--without-rasa | --for-shell] [--state var/run/stack.json]
    python scripts/example_bot.py down [--state var/run/stack.json]

Ports: CRM REST 8100, MCP server 8200, action server 5055, Rasa 5005, the chat page 8080, the approval
page 8081 (override with CRM_PORT, MCP_PORT, ACTION_SERVER_PORT, RASA_PORT, CHAT_PAGE_PORT,
APPROVAL_PAGE_PORT). The approval page's approvers are examples/crm_bot/approvers.yml's: each one's
password is APPROVER_<NAME>_PASSWORD or one generated once into var/approver_<name>_password; they log
in at the authorization server (OpenID Connect, which gets only the scrypt hashes and the roles; the
page is its client, APPROVAL_PAGE_CLIENT_SECRET or var/approval_page_client_secret), or with
MCP_AUTH=token on the page itself (it gets the hashes). The page's login-in-progress key is
APPROVAL_PAGE_KEY (var/approval_page_key); held calls and the page's sessions wait in the plugin's
database, var/mcp_bridge.sqlite3 (MCP_BRIDGE_DATABASE), beside the action server's record and the
people's tokens; the page asks the action server to tell a decision to its conversation with
APPROVAL_TELL_TOKEN (var/approval_tell_token), and the action server tells it through Rasa's HTTP
API. The chat page talks to
Rasa's signed socket.io channel; with --without-rasa it is served all the same and says it cannot
reach Rasa. --for-shell (make chat) starts what `rasa shell` needs, the CRM, its MCP server and the
authorization server, and the action server in development mode (rasa shell signs nothing), with no
channel key and no token, taking its messages as from nobody; not Rasa (rasa shell is one), nor the
chat page or the approval page (no browser, and a message from nobody is never held for an approver).
The CRM's MCP server is an OAuth protected resource: an authorization server
(oidc-provider, port 8300, AUTH_PORT; signing key made at each start) issues the action server's
bridge tokens by client credentials, its client secret CRM_OAUTH_CLIENT_SECRET or one generated
once into var/crm_oauth_client_secret. MCP_AUTH=person makes the bridge act as the person in the
conversation instead (authorization code with PKCE): the first note asks them to sign in at the
authorization server (dana-agent or lee-agent, any password), whose second client
(crm-bridge-person) has CRM_PERSON_CLIENT_SECRET or one generated once into
var/crm_person_client_secret; their tokens are kept encrypted in that database under MCP_TOKEN_KEY
(var/mcp_token_key), and the callback on the action server resumes the conversation through Rasa's HTTP
API. MCP_AUTH=token keeps the static bearer token instead:
CRM_MCP_TOKEN, or one generated once into var/crm_mcp_token. Likewise ACTION_SERVER_TOKEN
(var/action_server_token), which Rasa sends to the action server, CONFIRMATION_SECRET
(var/confirmation_secret), REST_CHANNEL_TOKEN (var/rest_channel_token: the REST channel's bearer
token), CHAT_JWT_KEY (var/chat_jwt_key: signs the chat page's tokens), MCP_BRIDGE_CHANNEL_KEY
(var/channel_key: the channels sign who sent each message with it, the action server checks it) and
RASA_AUTH_TOKEN (var/rasa_auth_token: Rasa's HTTP API). The state file (mode 0600) records what
runs, `rest_token` and `rasa_token`. SKILLS_DIR picks the skill files (default skills/). Logs go to
var/log/ (STACK_VAR moves var/ elsewhere).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devstack import services as procs  # noqa: E402

CALLBACK_PATH = "/mcp-bridge/oauth/callback"  # mcp_bridge.auth.person.CALLBACK_PATH

# Everything the stack writes (database, tokens, logs, PIDs) goes here; tests point it elsewhere.
VAR = Path(os.environ.get("STACK_VAR", REPO / "var"))
DEFAULT_STATE = VAR / "run" / "stack.json"


def secret(variable: str, file_name: str) -> str:
    """The variable's value, or a token generated once into var/<file_name>."""
    return procs.secret(VAR, variable, file_name)


def port(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def processes(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services a state file names (its other keys are the tokens)."""
    return {name: info for name, info in state.items() if isinstance(info, dict) and "pid" in info}


def up(state: Path, with_rasa: bool, for_shell: bool = False) -> int:
    if state.exists():
        if any(_alive(int(info["pid"])) for info in processes(json.loads(state.read_text())).values()):
            print(f"already running (see {state}); run `make down` first", file=sys.stderr)
            return 1
        state.unlink()  # left behind by a run that was killed; nothing of it is running
    mode = os.environ.get("MCP_AUTH", "oauth")
    if mode not in MCP_AUTH_MODES:
        print(f"MCP_AUTH={mode!r}: use one of {', '.join(MCP_AUTH_MODES)}", file=sys.stderr)
        return 2
    procs.use_crm_api_token(secret("CRM_API_TOKEN", "crm_api_token"))  # the CRM REST API's
    oauth = mode != "token"
    token = None if oauth else secret("CRM_MCP_TOKEN", "crm_mcp_token")
    action_port = port("ACTION_SERVER_PORT", 5055)
    rasa_port = port("RASA_PORT", 5005)
    person = (
        procs.PersonClient(
            "crm-bridge-person",
            secret("CRM_PERSON_CLIENT_SECRET", "crm_person_client_secret"),
            f"http://{procs.HOST}:{action_port}{CALLBACK_PATH}",
        )
        if mode == "person"
        else None
    )
    client = (
        procs.OAuthClient("crm-bridge", secret("CRM_OAUTH_CLIENT_SECRET", "crm_oauth_client_secret"))
        if oauth
        else None
    )
    action_token = secret("ACTION_SERVER_TOKEN", "action_server_token")
    page_port = port("CHAT_PAGE_PORT", 8080)
    access = procs.RasaAccess(
        rest_token=secret("REST_CHANNEL_TOKEN", "rest_channel_token"),
        chat_key=secret("CHAT_JWT_KEY", "chat_jwt_key"),
        api_token=secret("RASA_AUTH_TOKEN", "rasa_auth_token"),
        page_origins=procs.page_origins(page_port),
        channel_key=secret("MCP_BRIDGE_CHANNEL_KEY", "channel_key"),
    )
    db = Path(os.environ.get("CRM_DB", VAR / "crm.sqlite3"))
    logs = VAR / "log"
    started: list[procs.ServiceProcess] = []

    def start(service: procs.ServiceProcess, what: str) -> procs.ServiceProcess:
        print(f"==> starting {what} ...", flush=True)
        started.append(service)
        service.start()
        return service

    # The chat page and the approval page are for a browser: rasa shell needs neither (its messages name
    # nobody, so no call is ever held for an approver, and the action server takes no page's word).
    pages = not for_shell
    approval_port = port("APPROVAL_PAGE_PORT", 8081)
    approver_login = (
        procs.ApproverLogin(
            "approval-page",
            secret("APPROVAL_PAGE_CLIENT_SECRET", "approval_page_client_secret"),
            f"http://{procs.HOST}:{approval_port}/callback",
            approver_accounts(),
        )
        if oauth and pages
        else None
    )
    try:
        procs.seed_db(db)
        rest = start(
            _detached(procs.crm_rest(db, port=port("CRM_PORT", 8100)), logs / "crm-rest.log"), "CRM REST API"
        )
        services: dict[str, procs.ServiceProcess] = {"crm_rest": rest}
        mcp_port = port("MCP_PORT", 8200)
        bridge_env: dict[str, str] = {}
        if client is not None:
            auth = start(
                _detached(
                    procs.authorization_server(
                        f"http://{procs.HOST}:{mcp_port}/mcp",
                        client,
                        port=port("AUTH_PORT", 8300),
                        login=approver_login,
                        person=person,
                    ),
                    logs / "authorization-server.log",
                ),
                "authorization server (oidc-provider)",
            )
            services["authorization_server"] = auth
            bridge_env = procs.oauth_env(client, auth.url)
        if person is not None:
            bridge_env |= person_env(person, action_port)
        tell_token = secret("APPROVAL_TELL_TOKEN", "approval_tell_token")
        mcp = start(
            _detached(
                procs.crm_mcp(
                    rest.url,
                    token=token,
                    port=mcp_port,
                    issuer=services["authorization_server"].url if oauth else None,
                ),
                logs / "crm-mcp.log",
            ),
            "CRM MCP server",
        )
        services["crm_mcp"] = mcp
        endpoints = procs.write_endpoints(
            VAR / "run" / "endpoints.yml",
            f"http://127.0.0.1:{action_port}/webhook",
            action_token,
            mcp_oauth=oauth,
            mcp_person=person is not None,
        )
        skills = Path(os.environ.get("SKILLS_DIR", REPO / "examples" / "crm_bot" / "skills"))
        database = os.environ.get("MCP_BRIDGE_DATABASE") or str(VAR / "mcp_bridge.sqlite3")
        actions = start(
            procs.action_server(
                endpoints=endpoints,
                crm_url=rest.url,
                mcp_url=mcp.url,
                mcp_token=token,
                skills_dir=skills,
                audit_log=VAR / "audit.jsonl",
                port=action_port,
                log_path=logs / "action-server.log",
                detached=True,
                database=database,
                extra_env={
                    "CONFIRMATION_SECRET": secret("CONFIRMATION_SECRET", "confirmation_secret"),
                    # The sign-in's resume goes on through Rasa's API.
                    "RASA_URL": f"http://{procs.HOST}:{rasa_port}",
                    **(
                        {
                            "ACTION_SERVER_TOKEN": action_token,
                            "MCP_BRIDGE_CHANNEL_KEY": access.channel_key,
                            "RASA_AUTH_TOKEN": access.api_token,
                            # The approval page's decisions are told through the action server.
                            "APPROVAL_TELL_TOKEN": tell_token,
                        }
                        if not for_shell
                        # rasa shell (make chat) signs nothing: its messages are taken as from nobody,
                        # a development mode the action server allows only on loopback, with no channel
                        # key and no token (so no approval page tells it anything either).
                        else {
                            "MCP_BRIDGE_DEVELOPMENT": "1",
                            "ACTION_SERVER_TOKEN": None,
                            "MCP_BRIDGE_CHANNEL_KEY": None,
                            "RASA_AUTH_TOKEN": None,
                            "APPROVAL_TELL_TOKEN": None,
                        }
                    ),
                    **bridge_env,
                },
            ),
            f"action server (skills from {skills})",
        )
        services["action_server"] = actions
        if with_rasa:
            rasa = start(
                procs.rasa_server(
                    model=procs.current_model(),
                    endpoints=endpoints,
                    access=access,
                    port=rasa_port,
                    log_path=logs / "rasa.log",
                    detached=True,
                ),
                "Rasa server (loading the model takes up to a minute)",
            )
            services["rasa"] = rasa
        if pages:
            services["chat_page"] = start(
                procs.chat_page(
                    rasa_url=f"http://{procs.HOST}:{rasa_port}",
                    chat_key=access.chat_key,
                    port=page_port,
                    log_path=logs / "chat-page.log",
                    detached=True,
                ),
                "chat page",
            )
            services["approval_page"] = start(
                procs.approval_page(
                    actions_url=f"http://{procs.HOST}:{action_port}",
                    tell_token=tell_token,
                    page_key=secret("APPROVAL_PAGE_KEY", "approval_page_key"),
                    approvers=APPROVERS,
                    database=database,
                    audit_log=VAR / "audit.jsonl",
                    extra_env=approver_hashes(),
                    port=approval_port,
                    oidc=(services["authorization_server"].url, approver_login) if approver_login else None,
                    log_path=logs / "approval-page.log",
                    detached=True,
                ),
                "approval page",
            )
    except Exception as exc:
        for service in reversed(started):
            service.stop()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    state.parent.mkdir(parents=True, exist_ok=True)
    assert all(s.process is not None for s in services.values())
    recorded: dict[str, Any] = {
        name: {"pid": s.process.pid, "url": s.url} for name, s in services.items() if s.process
    }
    # For tools that talk to this stack (`mcp-bridge test e2e` reads them): the REST channel's token
    # and the HTTP API's. The file is the owner's alone from the moment it exists.
    recorded |= {"rest_token": access.rest_token, "rasa_token": access.api_token}
    procs.write_private(state, json.dumps(recorded, indent=2))
    print("\nrunning:")
    for name, service in services.items():
        print(f"  {name:<14} {service.url}")
    if for_shell:
        print(f"logs in {logs}")
        return 0
    print(f"\nopen the chat page: {services['chat_page'].url}")
    if person is not None:
        print(
            "the bridge acts as the person: the first note asks you to sign in "
            f"({', '.join(person.accounts)}, any password); `disconnect my CRM` forgets it"
        )
    print(
        f"approval page: {services['approval_page'].url} (log in as sam or alice; passwords in "
        f"{VAR}/approver_<name>_password)"
    )
    if with_rasa:
        print(
            "the REST channel needs Authorization: Bearer <rest_token>, Rasa's HTTP API ?token=<rasa_token>; "
            f"both are in {state}"
        )
    print(f"logs in {logs}; stop with `make down`")
    return 0


APPROVERS = REPO / "examples" / "crm_bot" / "approvers.yml"
# MCP_AUTH: oauth (client credentials, the default), person (authorization code), token (static).
MCP_AUTH_MODES = ("oauth", "person", "token")


def person_env(person: procs.PersonClient, action_port: int) -> dict[str, str]:
    """The action server's environment for acting as the person (PERSON_OAUTH_BLOCK's variables, the
    tokens' key; Rasa's HTTP API, which the sign-in callback resumes through, is set for every action
    server)."""
    return {
        "CRM_PERSON_CLIENT_ID": person.client_id,
        "CRM_PERSON_CLIENT_SECRET": person.client_secret,
        "ACTION_SERVER_PUBLIC_URL": f"http://{procs.HOST}:{action_port}",
        "MCP_TOKEN_KEY": secret("MCP_TOKEN_KEY", "mcp_token_key"),
    }


def approver_hashes() -> dict[str, str]:
    """APPROVER_<NAME>_PASSWORD_HASH for each approver of the example's file, from a password in the
    environment or generated once into var/ (the page sees only the hash)."""
    return {
        f"APPROVER_{name.upper()}_PASSWORD_HASH": account["password_hash"]
        for name, account in approver_accounts().items()
    }


@functools.cache
def approver_accounts() -> dict[str, dict[str, Any]]:
    """The example's approvers (their roles from approvers.yml) with a scrypt hash of each one's
    password: APPROVER_<NAME>_PASSWORD, or one generated once into var/approver_<name>_password."""
    import yaml

    from mcp_bridge.approvals.page import hash_password

    accounts = {}
    for name, entry in yaml.safe_load(APPROVERS.read_text())["approvers"].items():
        password = secret(f"APPROVER_{name.upper()}_PASSWORD", f"approver_{name}_password")
        accounts[name] = {"roles": list(entry["roles"]), "password_hash": hash_password(password)}
    return accounts


def _detached(service: procs.ServiceProcess, log_path: Path) -> procs.ServiceProcess:
    service.detached = True
    service.keep_log = True
    service.log_path.unlink(missing_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    service.log_path = log_path
    return service


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def down(state: Path) -> int:
    if not state.exists():
        print("nothing to stop")
        return 0
    services = processes(json.loads(state.read_text()))
    for name, info in reversed(list(services.items())):
        pid = int(info["pid"])
        left = procs.descendants(pid)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        procs.end_processes(left)
        print(f"stopped {name} (pid {pid})")
    state.unlink()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--without-rasa", action="store_true", help="start everything but the Rasa server")
    parser.add_argument(
        "--for-shell",
        action="store_true",
        help="what rasa shell needs (no Rasa, no pages): the action server in development mode (make chat)",
    )
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE, help="where the PIDs are kept")
    args = parser.parse_args()
    if args.command == "up":
        shell = args.for_shell
        return up(args.state, with_rasa=not (args.without_rasa or shell), for_shell=shell)
    return down(args.state)


if __name__ == "__main__":
    sys.exit(main())
