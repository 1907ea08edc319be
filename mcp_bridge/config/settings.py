"""Every environment variable the plugin reads, as one frozen :class:`Settings` read once per process.

The rules:

* Each field is one variable: its name, its default and what it does are the field's metadata, and
  ``docs/reference/environment.md`` is generated from them (``scripts/docs_reference.py``).
* :meth:`Settings.from_env` reads them all at once and checks what it can alone (a number is a
  positive number); a value it cannot use is a :class:`~mcp_bridge.errors.ConfigError` naming the
  variable and the reason. What needs more than the value (a secret's strength against the mode, a
  key ring) is checked where the value is used, still naming the variable.
* Some variables have a former name (a release's, or rasa_sdk's own), read when the variable is unset.
* The action server reads its settings once (:func:`mcp_bridge.action_server.build.settings`) and hands
  them down; the approval page and the ``mcp-bridge`` command read their own. Nothing else in the
  package reads the environment, except the channels, which run in Rasa's process and keep their own
  (:mod:`mcp_bridge.channels._settings`). ``environ`` is the whole environment as it was read, for the
  ``${VAR}`` names an operator writes in endpoints.yml and the approvers file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from mcp_bridge.contract import TYPED_ANSWER_CHANNELS
from mcp_bridge.errors import ConfigError

__all__ = ["DEFAULT_DATABASE", "Settings", "process_environment", "variables"]

DEFAULT_DATABASE = "var/mcp_bridge.sqlite3"


def _text(raw: str) -> str:
    return raw


def _flag(raw: str) -> bool:
    return raw == "1"


def _commas(raw: str) -> tuple[str, ...]:
    """Items separated by commas, each stripped; empty items dropped."""
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _words(raw: str) -> tuple[str, ...]:
    """Items separated by commas or spaces."""
    return tuple(raw.replace(",", " ").split())


def _positive_number(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a number") from None
    if not value > 0 or math.isinf(value):
        raise ValueError("must be a positive number")
    return value


def _positive_whole_number(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a whole number") from None
    if value <= 0:
        raise ValueError("must be a positive whole number")
    return value


def _setting(
    variable: str,
    default: Any,
    meaning: str,
    *,
    read: Callable[[str], Any] = _text,
    blank_is_unset: bool = True,
    former: Mapping[str, str] | None = None,
) -> Any:
    """A field for the environment variable ``variable``: ``read`` turns its text into the value
    (ValueError with the reason); a blank value counts as unset unless ``blank_is_unset`` is False;
    ``former`` names other variables read, in order, when it is unset, each with what it is."""
    return field(
        default=default,
        metadata={
            "variable": variable,
            "meaning": meaning,
            "read": read,
            "blank_is_unset": blank_is_unset,
            "former": dict(former or {}),
        },
    )


@dataclass(frozen=True)
class Settings:
    """The plugin's settings, one field per environment variable (see the module's rules)."""

    # --- the bot's files ---------------------------------------------------------------------------
    endpoints: str = _setting(
        "ENDPOINTS",
        "endpoints.yml",
        "The bot's `endpoints.yml` (its `mcp_servers:`); unset, `mcp-bridge check` and `mcp-bridge tools` "
        "read the one in the bot's folder.",
    )
    skills_dir: str = _setting("SKILLS_DIR", "skills", "The folder of the bot's skill files.")
    domain: str = _setting("DOMAIN", "domain.yml", "The bot's domain, a file or a domain directory.")
    confirmation_words: str | None = _setting(
        "CONFIRMATION_WORDS",
        None,
        "A word file added to the reader's English words "
        "([what counts as yes](../concepts/what-counts-as-yes.md)).",
    )
    # --- the record and its seal ------------------------------------------------------------------
    database: str = _setting(
        "MCP_BRIDGE_DATABASE",
        DEFAULT_DATABASE,
        "The plugin's one database ([the record](../concepts/who-may-answer.md)): the questions the action "
        "server asked and how each ended, the messages it used, the permissions people gave, the calls "
        "waiting for a second approver and the people's tokens. A SQLite file (created owner-only; "
        "`:memory:` for one process only, tests) or a `postgresql://` URL every replica and the approval "
        "page share (`pip install rasa-mcp-bridge[postgres]`); migrated when first opened.",
        former={
            "APPROVALS_DATABASE": "Release 0.3.0's name for the database of the calls held for a second "
            "approver; still names the plugin's one database when `MCP_BRIDGE_DATABASE` is unset (it and "
            "`MCP_TOKEN_STORE` must then name the same place).",
            "MCP_TOKEN_STORE": "Release 0.3.0's name for the database of the people's tokens; still names "
            "the plugin's one database when `MCP_BRIDGE_DATABASE` is unset (it and `APPROVALS_DATABASE` "
            "must then name the same place).",
        },
    )
    confirmation_secret: str | None = _setting(
        "CONFIRMATION_SECRET",
        None,
        "Seals the questions, permissions and server questions the action server keeps in its record and "
        "sends in the tracker; the same value on every replica. At least 32 bytes, random: a shorter one "
        "or a placeholder (`change-me`, ...) stops the action server at start (`MCP_BRIDGE_DEVELOPMENT=1` "
        "accepts it for a local trial, with a warning at every start). Unset: a key the record draws once "
        "and keeps in its SQLite database (a database writer could then forge what the seal protects); "
        "with a PostgreSQL database it is required.",
    )
    confirmation_extra_secrets: tuple[str, ...] = _setting(
        "CONFIRMATION_EXTRA_SECRETS",
        (),
        "More secrets, separated by commas, that open what they sealed but seal nothing: for a rotation. "
        "Add the new secret here on every replica, then make it `CONFIRMATION_SECRET` (the old one here), "
        "then drop the old one once its questions have expired. Each is checked like "
        "`CONFIRMATION_SECRET`.",
        read=_commas,
    )
    # --- the confirmation loop --------------------------------------------------------------------
    confirmation_ttl_seconds: float = _setting(
        "CONFIRMATION_TTL_SECONDS",
        300.0,
        "How long a question can be answered with yes; a later answer is told the question expired and "
        "it is asked again.",
        read=_positive_number,
        blank_is_unset=False,
    )
    message_max_chars: int = _setting(
        "MESSAGE_MAX_CHARS",
        5000,
        "A longer message is refused unread, by the confirmation loop, the skills and the example's form "
        "([what counts as yes](../concepts/what-counts-as-yes.md)).",
        read=_positive_whole_number,
        blank_is_unset=False,
    )
    typed_answer_channels: tuple[str, ...] = _setting(
        "MCP_BRIDGE_TYPED_ANSWER_CHANNELS",
        TYPED_ANSWER_CHANNELS,
        "The input channels (as Rasa names them; separated by spaces or commas) where a question is asked "
        "in words followed by the answers to type, with no buttons; default `cmdline` (`rasa shell`, whose "
        "menu of buttons a typed yes never reaches). Set it empty for buttons everywhere.",
        read=_words,
        blank_is_unset=False,
    )
    channel_key: str | None = _setting(
        "MCP_BRIDGE_CHANNEL_KEY",
        None,
        "The key the plugin's channels sign who sent each message with, and the action server checks (one "
        "or more keys separated by spaces: the first signs, all verify, for rotation). The same on the "
        "Rasa server and every action server; without it the action server does not start "
        "([who may answer](../concepts/who-may-answer.md)).",
    )
    development: bool = _setting(
        "MCP_BRIDGE_DEVELOPMENT",
        False,
        "`1`: for a local trial only (what `make chat` uses): unsigned messages are taken as from nobody "
        "and a short `CONFIRMATION_SECRET` is accepted, with a warning at every start. Refused beside "
        "`MCP_BRIDGE_CHANNEL_KEY`, `ACTION_SERVER_TOKEN` or an address other than loopback: a deployment "
        "never runs it.",
        read=_flag,
    )
    # --- questions from a server ------------------------------------------------------------------
    elicitation_wait_seconds: float = _setting(
        "ELICITATION_WAIT_SECONDS",
        120.0,
        "How long a 2025-11-25 server's call is kept open for the person's answer, per question; then the "
        "server hears `cancel`.",
        read=_positive_number,
        blank_is_unset=False,
    )
    elicitation_max_waiting: int = _setting(
        "ELICITATION_MAX_WAITING",
        16,
        "How many calls of 2025-11-25 servers waiting for the person's answer one process holds open at "
        "most; a question beyond that is answered `cancel` "
        "([questions from a server](../mcp/elicitation.md)).",
        read=_positive_whole_number,
        blank_is_unset=False,
        former={
            "ELICITATION_MAX_HELD": "Release 0.2.0's name of `ELICITATION_MAX_WAITING`, still read when "
            "that one is unset."
        },
    )
    # --- a second approver ------------------------------------------------------------------------
    approval_run_lease_seconds: float = _setting(
        "APPROVAL_RUN_LEASE_SECONDS",
        300.0,
        "The lease on an approved call being run, which its action server renews every third of it while "
        "the run goes on: how long after that action server died another may take the call up again, "
        "under the same idempotency key.",
        read=_positive_number,
        blank_is_unset=False,
    )
    approval_text_characters: str = _setting(
        "APPROVAL_TEXT_CHARACTERS",
        "",
        "Characters a text condition of a second approver's rule (`when: {argument, contains_any}`) reads "
        "besides Latin letters, digits, common punctuation and spaces: code points and ranges, "
        "`U+0370-U+03FF U+1F00-U+1FFF` for Greek. A text with any other character, or with an invisible "
        "(default-ignorable) one, waits for the approver "
        "([a second approver](../concepts/second-approver.md)); a value the action server cannot read "
        "stops it at start.",
    )
    approval_tell_token: str | None = _setting(
        "APPROVAL_TELL_TOKEN",
        None,
        "The approval page's token at the action server, at least 32 random characters, the same on both: "
        "the page asks `POST /mcp-bridge/approvals/tell` to tell a requester's conversation of a decision, "
        "and nothing else. Set on the action server, it needs `RASA_URL` and `RASA_AUTH_TOKEN` too (it "
        "tells the conversation through Rasa's API), or the server does not start.",
    )
    # --- the action server's address and tokens ---------------------------------------------------
    action_server_host: str = _setting(
        "ACTION_SERVER_HOST",
        "127.0.0.1",
        "Where the action server (and `mcp-bridge grpc`) listens. Set `0.0.0.0` only behind a proxy; any "
        "address other than loopback needs `ACTION_SERVER_TOKEN`, or the server refuses to start.",
        former={
            "SANIC_HOST": "rasa_sdk's own name for the address, used when `ACTION_SERVER_HOST` is unset."
        },
    )
    action_server_token: str | None = _setting(
        "ACTION_SERVER_TOKEN",
        None,
        "When set, `/webhook`, `/actions` and `/metrics` (and every gRPC call) answer 401 without it; give "
        "Rasa the same value as `action_endpoint: {url: ..., token: ...}`, or better as `headers: "
        '{Authorization: "Bearer ..."}`, which keeps it out of URLs and so out of proxies\' logs (the '
        "cluster does).",
    )
    action_server_allowed_hosts: tuple[str, ...] = _setting(
        "ACTION_SERVER_ALLOWED_HOSTS",
        (),
        "On loopback the action server answers only requests whose `Host` names a loopback host (DNS "
        "rebinding); these names (separated by spaces or commas) are allowed too.",
        read=_words,
    )
    action_server_public_url: str | None = _setting(
        "ACTION_SERVER_PUBLIC_URL",
        None,
        "The action server's public address; its host is allowed in `Host` headers (the sign-in "
        "callback's `redirect_uri` is under it).",
    )
    worker_name: str | None = _setting(
        "SANIC_WORKER_NAME",
        None,
        "Set by Sanic in its worker processes; the plugin reads it to tell a worker from the main process.",
    )
    # --- Rasa's HTTP API --------------------------------------------------------------------------
    rasa_url: str | None = _setting(
        "RASA_URL",
        None,
        "Rasa's HTTP API (`--enable-api`), so the conversation goes on by itself after a person signs in or "
        "an approver decides.",
    )
    rasa_auth_token: str | None = _setting(
        "RASA_AUTH_TOKEN",
        None,
        "Rasa's HTTP API token, on the action server only: the sign-in callback resumes the conversation, "
        "and the approval page's decisions are told to theirs, through Rasa's API with it; `mcp-bridge "
        "test e2e` uses it as `--rasa-token`. The approval page refuses to start with it in its "
        "environment.",
    )
    # --- the people's tokens ----------------------------------------------------------------------
    token_key: str | None = _setting(
        "MCP_TOKEN_KEY",
        None,
        "The key the people's OAuth tokens are encrypted under (a server acting as the person); at least "
        "32 random bytes, the same on every replica; a missing, short or placeholder key stops the action "
        "server.",
    )
    # --- the audit trail and telemetry ------------------------------------------------------------
    audit_log: str = _setting(
        "AUDIT_LOG",
        "var/audit.jsonl",
        "The audit trail ([the audit trail](audit.md)), created readable by its owner only; `mcp-bridge "
        "test e2e` and `mcp-bridge audit verify` read the same file. Empty: no file.",
        blank_is_unset=False,
    )
    audit_key: str | None = _setting(
        "AUDIT_KEY",
        None,
        "The key the trail's digests and chain are HMACs under: at least 32 random bytes, the same on "
        "every replica, and given to `mcp-bridge test e2e` and `mcp-bridge audit verify`. Unset: a public "
        "key (with a warning at start), which tells accidental damage only.",
    )
    audit_extra_keys: tuple[str, ...] = _setting(
        "AUDIT_EXTRA_KEYS",
        (),
        "Former audit keys, separated by commas: they verify and match the entries they signed and sign "
        "nothing. Rotate by moving `AUDIT_KEY` here and setting a new one.",
        read=_commas,
    )
    audit_to_log: bool = _setting(
        "AUDIT_TO_LOG",
        False,
        "`1`: also copy each audit entry into the process log (logger `mcp_bridge.observability.audit`); "
        "by default entries go to the file only.",
        read=_flag,
    )
    audit_otlp_logs: bool = _setting(
        "AUDIT_OTLP_LOGS",
        False,
        "`1`: also send each audit entry as an OpenTelemetry log record, by OTLP to the collector of "
        "endpoints.yml's `tracing:` block ([tracing](../deploying/tracing.md)).",
        read=_flag,
    )
    tracing_service_name: str = _setting(
        "RASA_SDK_TRACING_SERVICE_NAME",
        "rasa_sdk",
        "rasa-sdk's service name for its spans (default `rasa_sdk`); the plugin's OTLP metrics and log "
        "records carry the same.",
        blank_is_unset=False,
    )
    # --- the approval page ------------------------------------------------------------------------
    approval_page_key: str = _setting(
        "APPROVAL_PAGE_KEY",
        "",
        "`mcp-bridge approval-page --oidc-issuer`: the key the login in progress at the OpenID provider is "
        "signed with (a cookie), at least 32 random characters; the page refuses to start without it then. "
        "Sessions are kept on the server (`APPROVAL_PAGE_SESSIONS`).",
    )
    approval_page_sessions: str | None = _setting(
        "APPROVAL_PAGE_SESSIONS",
        None,
        "`mcp-bridge approval-page`: where its sessions are kept, a `redis://` URL (the `redis` package; "
        "the cluster's), else unset: the plugin's database (`MCP_BRIDGE_DATABASE`). A cookie holds a random "
        "value, the store its digest: logging out ends the session everywhere.",
    )
    oidc_client_id: str = _setting(
        "OIDC_CLIENT_ID",
        "",
        "`mcp-bridge approval-page --oidc-issuer`: the page's client id at the approvers' OpenID provider.",
    )
    oidc_client_secret: str = _setting(
        "OIDC_CLIENT_SECRET",
        "",
        "`mcp-bridge approval-page --oidc-issuer`: the page's client secret at that provider (never logged).",
    )
    # --- the mcp-bridge command -------------------------------------------------------------------
    action_server_port: int = _setting(
        "ACTION_SERVER_PORT",
        5055,
        "The port of `mcp-bridge grpc` (rasa_sdk's own command takes `--port`; `make actions` passes this "
        "variable to it).",
        read=_positive_whole_number,
    )
    operator_token: str | None = _setting(
        "MCP_OPERATOR_TOKEN",
        None,
        "`mcp-bridge tools` and `check --live`: an access token of yours for a server that acts as the "
        "person, used only to list its tools, never printed.",
    )
    rest_channel_token: str | None = _setting(
        "REST_CHANNEL_TOKEN",
        None,
        "`mcp-bridge test e2e`: the REST channel's bearer token, when `--rest-token-file` is not given.",
    )
    # The whole environment as it was read: the `${VAR}`s an operator names in endpoints.yml and the
    # approvers file are their own, not settings of the plugin.
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings ``env`` holds (default: this process's environment, read now); ConfigError
        naming the variable and the reason for a value that cannot be used."""
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for spec in fields(cls):
            if "variable" not in spec.metadata:
                continue
            name, raw = _given(spec.metadata, env)
            if raw is None:
                continue
            try:
                values[spec.name] = spec.metadata["read"](raw)
            except ValueError as exc:
                raise ConfigError(f"environment variable {name}: {exc}") from None
        return cls(**values, environ=env)

    def explicitly(self, variable: str) -> bool:
        """Whether ``variable`` was set (not blank) where these settings were read, rather than
        defaulted: for a caller whose own default differs (``mcp-bridge tools`` looks in the bot's
        folder)."""
        return bool(self.environ.get(variable))


def process_environment() -> Mapping[str, str]:
    """This process's environment as it is now, for the ``${VAR}`` names an operator writes in a file
    (endpoints.yml, the approvers file), which are theirs, not settings of the plugin."""
    return os.environ


def _given(metadata: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, str | None]:
    """(the variable that gives the value, its text), or (the variable, None) when none does."""
    variable: str = metadata["variable"]
    names = [variable, *metadata["former"]]
    given = {
        name: env[name]
        for name in names
        if name in env and (env[name] != "" or not metadata["blank_is_unset"])
    }
    if variable in given:
        return variable, given[variable]
    former = {name: value for name, value in given.items() if name != variable}
    if len(set(former.values())) > 1:
        raise ConfigError(_former_differ(variable, list(former)))
    for name, value in former.items():
        return name, value
    return variable, None


def _former_differ(variable: str, names: list[str]) -> str:
    if variable == "MCP_BRIDGE_DATABASE":
        return (
            f"environment variables {' and '.join(names)} name different databases; since 0.4.0 the "
            f"approvals, the people's tokens and the action server's record share one: set {variable}"
        )
    return f"environment variables {' and '.join(names)} differ; set {variable}"


def variables() -> list[tuple[str, Any, str, str | None]]:
    """(variable, default, meaning, the field it sets or None for a former name) of every setting, in
    the order of the fields: what the environment reference page lists."""
    found: list[tuple[str, Any, str, str | None]] = []
    for spec in fields(Settings):
        if "variable" not in spec.metadata:
            continue
        found.append((spec.metadata["variable"], spec.default, spec.metadata["meaning"], spec.name))
        for name, meaning in spec.metadata["former"].items():
            found.append((name, spec.default, meaning, None))
    return found
