"""The ``mcp_servers:`` list of endpoints.yml, with Rasa Pro 3.21's keys and their meaning.

```yaml
mcp_servers:
  - name: crm
    url: "${CRM_MCP_URL:-http://127.0.0.1:8200/mcp}"
    type: http                     # http or https
    token: "${CRM_MCP_TOKEN}"      # sent as "Authorization: Bearer <token>"
    # or: api_key: "${CRM_API_KEY}", sent as <header_name>: <header_format with {key} replaced>
    #     header_name: X-API-Key   # default Authorization
    #     header_format: "{key}"   # default "Bearer {key}"
    # or: oauth:                   # OAuth 2 client credentials (mcp_bridge.auth.client_credentials)
    #       client_id: "${CRM_OAUTH_CLIENT_ID}"
    #       client_secret: "${CRM_OAUTH_CLIENT_SECRET}"
    #       token_url: "${CRM_OAUTH_TOKEN_URL}"  # optional: else discovered (the server's metadata)
    #       issuer: https://auth.example.com  # optional: the only authorization server discovery may name
    #       scope: crm.notes       # optional: the scope asked for
    #       audience: ...          # optional: sent as the token request's `audience`
    #       timeout: 10            # optional: seconds for the token request
    # or, acting as the person in the conversation (mcp_bridge.auth.person):
    #     oauth:
    #       grant: authorization_code  # default client_credentials
    #       client_id: "${CRM_OAUTH_CLIENT_ID}"
    #       client_secret: "${CRM_OAUTH_CLIENT_SECRET}"  # optional: a public client uses PKCE only
    #       scope: crm.notes
    #       redirect_uri: "${ACTION_SERVER_PUBLIC_URL}/mcp-bridge/oauth/callback"
    #       issuer: https://auth.example.com  # optional: people sign in there, at no other server
    tool_timeout: 10               # seconds to wait for one tool call's answer
    meta_map:                      # sent in every tools/call's _meta
      static: {source: rasa}
      from_slots: [{slot: user_id, param: user}]
    trusted: true                  # the bridge's own: docs/reference/endpoints.md
    honours_idempotency_key: true  # the bridge's own: a write whose outcome is unknown may be repeated
    trace_context: false           # the bridge's own: send no traceparent/tracestate in _meta (default true)
```

Rasa Pro reads the keys in ``rasa/core/config/available_endpoints.py`` (``MCPServerConfig``,
``MCPMetaMapConfig``), ``rasa/shared/agents/auth/`` (which key picks which header) and
``rasa/mantle/config/integrations.py`` (``tool_timeout``); docs/reference/endpoints.md has the table
(generated from the lists below), docs/mcp/connecting.md the rest. ``trusted``, ``timeout``,
``honours_idempotency_key`` and ``trace_context`` are the bridge's own.

Rasa Pro Mantle's ``integrations.yml`` has the same list, read as Mantle reads it
(``rasa/mantle/config/integrations.py``) when the file is named so (:data:`MANTLE_FILE`): ``type``
may be left out and is the url's scheme as written (``http`` or ``https``), so the url must begin with
one before any ``${VAR}``; ``token``, ``api_key`` and ``oauth.client_secret`` must be written as a
``${VAR}``; the name is letters, digits, ``_``, ``.`` and ``-`` (``mcp/<name>:<tool>`` imports it); and
``meta_map.from_slots``, which Mantle refuses there, is refused too.

``${VAR}`` in ``url``, ``token``, ``api_key`` and the ``oauth`` fields is expanded from the
environment. The action server refuses a variable that is not set, naming the file, the server and
the variable;
``allow_unset`` (the offline ``mcp-bridge check``) reads the file's shape without the values and
records which variables are missing, and such a server is never connected to.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mcp_bridge.config.envsubst import expand, required_variables, unset_variables
from mcp_bridge.config.settings import process_environment
from mcp_bridge.config.yamlfile import load_yaml
from mcp_bridge.errors import ConfigError

_TYPES = ("http", "https")
DEFAULT_TIMEOUT = 10.0
# Rasa Pro Mantle's file of MCP servers (and LLMs, channels): its mcp_servers are read in Mantle's way.
MANTLE_FILE = "integrations.yml"
_MANTLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_WRITTEN_AS_VARIABLE = re.compile(r"\$\{\w+\}")  # Rasa Pro's SECRET_DATA_FORMAT_PATTERN, matched at the start
# Rasa Pro's defaults for api_key (rasa/shared/agents/auth/auth_strategy/api_key_auth_strategy.py).
DEFAULT_HEADER_NAME = "Authorization"
DEFAULT_HEADER_FORMAT = "Bearer {key}"

RASA_PRO_KEYS = (
    "name",
    "url",
    "type",
    "token",
    "api_key",
    "header_name",
    "header_format",
    "tool_timeout",
    "meta_map",
    "oauth",
)
BRIDGE_KEYS = ("trusted", "timeout", "honours_idempotency_key", "trace_context")
# Keys Rasa Pro 3.21 reads on a server that the bridge does not do (yet): refused, with the reason.
NOT_SUPPORTED = {
    "module": "Rasa Pro's custom authentication class is not supported; use token or api_key",
    "pre_call_hook": "Rasa Pro's call-time credential hook is not supported; use meta_map for _meta",
}
_OAUTH_KEYS = ("client_id", "client_secret", "token_url", "scope", "audience", "timeout")
_OAUTH_REQUIRED = ("client_id", "client_secret")
# The bridge's own key in the block, for both grants: the authorization server's issuer (RFC 8414).
# Discovery may lead to that server alone; one that names another is refused before anything is sent.
_ISSUER = "issuer"
CLIENT_CREDENTIALS = "client_credentials"
AUTHORIZATION_CODE = "authorization_code"
_GRANTS = (CLIENT_CREDENTIALS, AUTHORIZATION_CODE)
# Acting as the person: the endpoints are discovered from the server's protected-resource metadata.
_PERSON_KEYS = ("grant", "client_id", "client_secret", "scope", "redirect_uri", _ISSUER, "timeout")
_PERSON_REQUIRED = ("client_id", "redirect_uri")
DEFAULT_OAUTH_TIMEOUT = 10.0
_META_KEYS = ("static", "from_slots")
_FROM_SLOTS_KEYS = ("slot", "param")
# _meta keys the call itself fills in: a meta_map entry must not overwrite them.
RESERVED_META = {
    "idempotency_key": "the bridge sends a confirmed write's idempotency key under it",
    "progressToken": "MCP's own progress token goes there",
    "traceparent": "the bridge sends the W3C trace context there (trace_context: false turns it off)",
    "tracestate": "the bridge sends the W3C trace context there (trace_context: false turns it off)",
}
# Headers the MCP transport sets itself: an api_key sent in one of them would break every request.
_TRANSPORT_HEADERS = {
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "transfer-encoding",
}
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token


@dataclass(frozen=True)
class SlotMeta:
    """One ``meta_map.from_slots`` entry: the value of slot ``slot`` goes into ``_meta[param]``."""

    slot: str
    param: str


@dataclass(frozen=True)
class OAuthConfig:
    """Rasa Pro's ``oauth:`` block: OAuth 2 client credentials, asked for at ``token_url`` (or at the
    token endpoint discovery finds when it is empty)."""

    client_id: str
    client_secret: str = field(repr=False)
    token_url: str = ""
    scope: str | None = None
    audience: str | None = None
    timeout: float = DEFAULT_OAUTH_TIMEOUT
    # client_credentials (the bridge's own identity) or authorization_code (the person's: each
    # person signs in once, mcp_bridge.auth.person); the latter discovers its endpoints and
    # has a redirect_uri, and its client_secret may be empty (a public client, PKCE only).
    grant: str = CLIENT_CREDENTIALS
    redirect_uri: str | None = None
    # The authorization server's issuer identifier: discovery may lead there and nowhere else.
    issuer: str | None = None

    @property
    def acts_as_person(self) -> bool:
        return self.grant == AUTHORIZATION_CODE


@dataclass(frozen=True)
class MCPServerConfig:
    name: str
    url: str
    type: str = "http"
    # repr=False keeps the secrets out of logs and tracebacks that print the config.
    api_key: str | None = field(default=None, repr=False)
    # Only a trusted server's read-only annotations may let a tool skip confirmation.
    trusted: bool = False
    # Seconds to wait for one tool call's answer (``tool_timeout``, or the bridge's ``timeout``).
    timeout: float = DEFAULT_TIMEOUT
    # The server keeps one write per ``_meta.idempotency_key``: only then is a write whose outcome
    # is unknown repeated. A server that ignores the key would write twice.
    honours_idempotency_key: bool = False
    # Send the W3C trace context (traceparent, tracestate) in every request's _meta when tracing is
    # on, so the server's spans join the trace (mcp_bridge.observability.tracing).
    trace_context: bool = True
    token: str | None = field(default=None, repr=False)
    header_name: str = DEFAULT_HEADER_NAME
    header_format: str = DEFAULT_HEADER_FORMAT
    meta_static: tuple[tuple[str, str], ...] = ()
    meta_from_slots: tuple[SlotMeta, ...] = ()
    # OAuth 2 client credentials instead of a static token (mcp_bridge.auth.client_credentials does the flow).
    oauth: OAuthConfig | None = field(default=None, repr=False)
    # Where the server is configured ("endpoints.yml: mcp_servers[0] (crm)"), for messages.
    place: str = field(default="", compare=False, repr=False)
    # The environment variables url, token, api_key and oauth cannot do without (no :-default).
    variables: tuple[str, ...] = field(default=(), compare=False)
    # (key, variable) for each variable that was not set when the file was read (allow_unset only).
    unset: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def where(self) -> str:
        return self.place or f"MCP server {self.name!r}"

    @property
    def acts_as_person(self) -> bool:
        """Calls go out with the token of the person in the conversation (``grant: authorization_code``)."""
        return self.oauth is not None and self.oauth.acts_as_person

    def headers(self) -> dict[str, str]:
        """The authentication header, as Rasa Pro sends it (api_key first, as Rasa Pro picks it)."""
        if self.api_key:
            return {self.header_name: self.header_format.format(key=self.api_key)}
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        return {}

    def auth_description(self) -> str:
        """Which authentication the bridge uses for this server, never a secret: for the CLI."""
        if self.oauth is not None and self.oauth.acts_as_person:
            parts = [f"client_id {self.oauth.client_id}"]
            parts += [f"scope {self.oauth.scope}"] if self.oauth.scope else []
            parts += [f"redirect_uri {self.oauth.redirect_uri}"]
            parts += [f"issuer {self.oauth.issuer}"] if self.oauth.issuer else []
            return f"oauth acting as the person (authorization code with PKCE; {', '.join(parts)})"
        if self.oauth is not None:
            token_url = self.oauth.token_url or "discovered"
            parts = [f"client_id {self.oauth.client_id}", f"token_url {token_url}"]
            parts += [f"issuer {self.oauth.issuer}"] if self.oauth.issuer else []
            parts += [f"scope {self.oauth.scope}"] if self.oauth.scope else []
            parts += [f"audience {self.oauth.audience}"] if self.oauth.audience else []
            return f"oauth client credentials ({', '.join(parts)})"
        if self.api_key:
            return f"api_key (header {self.header_name})"
        if self.token:
            return "token (Authorization: Bearer)"
        return "none"

    def call_meta(self, slots: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``_meta`` for a tool call: ``static`` first, then each ``from_slots`` slot's value.

        A slot without a value is not sent. Rasa Pro's ``build_mcp_meta``
        (rasa/shared/utils/mcp/utils.py) puts null there, and its MCP client drops null values when
        it serialises the request (``exclude_none``), as the bridge's does: the server sees no key.
        """
        meta: dict[str, Any] = dict(self.meta_static)
        for entry in self.meta_from_slots:
            value = (slots or {}).get(entry.slot)
            if value is not None:
                meta[entry.param] = value
        return meta

    def unset_message(self) -> str | None:
        """What is missing for this server to be used, or None when every variable was set."""
        if not self.unset:
            return None
        key, name = self.unset[0]
        return f"{self.where}: {key!r} uses ${{{name}}}, but the environment variable {name} is not set"

    def require_values(self) -> None:
        """Raise :class:`ConfigError` (file, server, variable) if a variable was not set."""
        message = self.unset_message()
        if message is not None:
            raise ConfigError(message)


def load_mcp_servers(
    path: str | Path, env: Mapping[str, str] | None = None, *, allow_unset: bool = False
) -> dict[str, MCPServerConfig]:
    """Read and check the ``mcp_servers`` list; a file without one configures no servers. A file
    named ``integrations.yml`` is read as Rasa Pro Mantle reads it (the module's docstring)."""
    path = Path(path)
    document = load_yaml(path) or {}
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return parse_mcp_servers(
        document.get("mcp_servers"),
        source=str(path),
        env=env,
        allow_unset=allow_unset,
        mantle=path.name == MANTLE_FILE,
    )


def parse_mcp_servers(
    entries: Any,
    source: str,
    env: Mapping[str, str] | None = None,
    *,
    allow_unset: bool = False,
    mantle: bool = False,
) -> dict[str, MCPServerConfig]:
    """The servers of an ``mcp_servers`` list from ``source``; with ``mantle``, as Rasa Pro Mantle
    reads its ``integrations.yml``."""
    env = process_environment() if env is None else env
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: mcp_servers must be a list of servers")
    servers: dict[str, MCPServerConfig] = {}
    for index, entry in enumerate(entries):
        server = _Server(entry, f"{source}: mcp_servers[{index}]", env, allow_unset, mantle).parse()
        if server.name in servers:
            raise ConfigError(f"{source}: mcp_servers[{index}]: duplicate server name {server.name!r}")
        servers[server.name] = server
    return servers


class _Server:
    """One entry of ``mcp_servers``, checked key by key; every message starts with its place."""

    def __init__(
        self, entry: Any, where: str, env: Mapping[str, str], allow_unset: bool, mantle: bool = False
    ) -> None:
        self.entry = entry
        self.where = where
        self.env = env
        self.allow_unset = allow_unset
        self.mantle = mantle
        self.variables: list[str] = []
        self.unset: list[tuple[str, str]] = []

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def parse(self) -> MCPServerConfig:
        entry = self.entry
        if not isinstance(entry, dict):
            raise self.fail("each server must be a mapping with name, url and type")
        name = entry.get("name")
        if name is None:
            raise self.fail("missing field 'name'")
        if not isinstance(name, str) or not name.strip():
            raise self.fail("'name' must be a non-empty string")
        self.where = f"{self.where} ({name})"
        self._known_keys()
        if self.mantle:
            self._as_mantle_reads_it(name)
            entry = self.entry
        for required in ("url", "type"):
            if entry.get(required) in (None, ""):
                raise self.fail(f"missing field {required!r}")
        server_type = self._expanded("type")
        assert server_type is not None  # an unset variable in type is always an error
        if server_type not in _TYPES:
            raise self.fail(f"type must be one of {', '.join(_TYPES)}, not {server_type!r}")
        url = self._expanded("url")
        if url is not None:
            parsed = urlparse(url)
            allowed_schemes = ("https",) if server_type == "https" else ("http", "https")
            if parsed.scheme not in allowed_schemes or not parsed.netloc:
                raise self.fail(f"url must be an {' or '.join(allowed_schemes)} URL, got {url!r}")
        token, api_key = self._secret("token"), self._secret("api_key")
        if "token" in entry and "api_key" in entry:
            raise self.fail(
                "'token' and 'api_key' are two ways to authenticate; give one (a token is sent as "
                "'Authorization: Bearer <token>'; an api_key as header_name / header_format say)"
            )
        oauth = self._oauth()
        header_name, header_format = self._api_key_header()
        static, from_slots = self._meta_map()
        trusted = entry.get("trusted", False)
        if not isinstance(trusted, bool):
            raise self.fail("'trusted' must be true or false")
        honours_key = entry.get("honours_idempotency_key", False)
        if not isinstance(honours_key, bool):
            raise self.fail("'honours_idempotency_key' must be true or false")
        trace_context = entry.get("trace_context", True)
        if not isinstance(trace_context, bool):
            raise self.fail("'trace_context' must be true or false")
        return MCPServerConfig(
            name=name,
            url=url if url is not None else str(entry["url"]),
            type=server_type,
            api_key=api_key,
            trusted=trusted,
            honours_idempotency_key=honours_key,
            trace_context=trace_context,
            timeout=self._timeout(),
            token=token,
            header_name=header_name,
            header_format=header_format,
            meta_static=static,
            meta_from_slots=from_slots,
            oauth=oauth,
            place=self.where,
            variables=tuple(dict.fromkeys(self.variables)),
            unset=tuple(self.unset),
        )

    def _as_mantle_reads_it(self, name: str) -> None:
        """Rasa Pro Mantle's rules for an entry of ``integrations.yml``; a missing ``type`` is the
        url's scheme as written (``self.entry`` is then a copy with it)."""
        entry = self.entry = dict(self.entry)
        if not _MANTLE_NAME.fullmatch(name):
            raise self.fail(
                "'name' must be letters, digits, '_', '.' and '-', starting with a letter or digit "
                "(skills import its tools as mcp/<name>:<tool>)"
            )
        url = entry.get("url")
        if url in (None, ""):
            raise self.fail("missing field 'url'")
        scheme = urlparse(str(url)).scheme.lower()
        if scheme not in _TYPES:
            raise self.fail(
                f"url must begin with http:// or https:// as written, got {url!r}: Rasa Pro reads "
                f"{MANTLE_FILE} without expanding ${{...}} and takes the server's type from that scheme "
                "(write it out, e.g. http://${CRM_HOST}/mcp)"
            )
        if entry.get("type") in (None, ""):
            entry["type"] = scheme
        secrets = {key: entry[key] for key in ("token", "api_key") if key in entry}
        oauth = entry.get("oauth")
        if isinstance(oauth, dict) and "client_secret" in oauth:
            secrets["oauth.client_secret"] = oauth["client_secret"]
        for key, value in secrets.items():
            if not (isinstance(value, str) and _WRITTEN_AS_VARIABLE.match(value)):
                raise self.fail(
                    f"{key!r} must be written as ${{VARIABLE}} in {MANTLE_FILE}: Rasa Pro refuses a secret "
                    "written out in it (and it would sit in the file)"
                )
        meta_map = entry.get("meta_map")
        if isinstance(meta_map, dict) and meta_map.get("from_slots") is not None:
            raise self.fail(
                f"meta_map.from_slots: Rasa Pro refuses it in {MANTLE_FILE} (Mantle has no slots); send "
                "fixed values with meta_map.static, or configure the server in endpoints.yml"
            )

    def _known_keys(self) -> None:
        for key in self.entry:
            if key in NOT_SUPPORTED:
                raise self.fail(f"{key}: {NOT_SUPPORTED[key]}")
        unknown = [key for key in self.entry if key not in RASA_PRO_KEYS and key not in BRIDGE_KEYS]
        if unknown:
            raise self.fail(
                f"unknown key(s) {_listed(unknown)}; a server takes "
                f"{', '.join(RASA_PRO_KEYS)} (Rasa Pro's) and {', '.join(BRIDGE_KEYS)} (the bridge's)"
            )

    def _expanded(self, key: str, value: Any = None) -> str | None:
        """``entry[key]`` (or ``value``, found at ``key``) with its variables expanded; None when one
        is unset and that is allowed."""
        value = self.entry[key] if value is None else value
        if not isinstance(value, str):
            raise self.fail(f"{key!r} must be a string")
        if key != "type":
            self.variables += required_variables(value)
        missing = unset_variables(value, self.env)
        if missing:
            if not self.allow_unset or key == "type":
                name = missing[0]
                raise self.fail(f"{key!r} uses ${{{name}}}, but the environment variable {name} is not set")
            self.unset += [(key, name) for name in missing]
            return None
        return expand(value, self.env)

    def _secret(self, key: str) -> str | None:
        if key not in self.entry:
            return None
        if self.entry[key] is None:
            raise self.fail(f"{key!r} is empty")
        value = self._expanded(key)
        if value is None:
            return None  # its variable is unset (allow_unset): not connectable, shape checked
        if not value.strip():
            raise self.fail(f"{key!r} is empty")
        if any(ord(char) < 32 or ord(char) == 127 for char in value):
            # The value stays out of the message: it is a secret.
            raise self.fail(
                f"{key!r} contains a control character (a line break?), which no HTTP header can carry"
            )
        return value

    def _oauth(self) -> OAuthConfig | None:
        """The ``oauth`` block; None when absent, or when one of its variables is unset (allow_unset)."""
        if "oauth" not in self.entry:
            return None
        for other in ("token", "api_key"):
            if other in self.entry:
                raise self.fail(
                    f"'oauth' and {other!r} are two ways to authenticate; give one (oauth gets a token "
                    f"from the token_url for each session; {other!r} is sent as it is)"
                )
        block = self.entry["oauth"]
        if not isinstance(block, dict):
            raise self.fail("'oauth' must be a mapping with client_id and client_secret")
        grant = block.get("grant", CLIENT_CREDENTIALS)
        if grant not in _GRANTS:
            raise self.fail(
                f"'oauth.grant' must be {CLIENT_CREDENTIALS} (the bridge's own identity) or "
                f"{AUTHORIZATION_CODE} (acting as the person in the conversation), not {grant!r}"
            )
        if grant == AUTHORIZATION_CODE:
            return self._person_oauth(block)
        unknown = [key for key in block if key not in (*_OAUTH_KEYS, "grant", _ISSUER)]
        if unknown:
            raise self.fail(
                f"oauth: unknown key(s) {_listed(unknown)}; it takes {', '.join(_OAUTH_KEYS)}, {_ISSUER}"
            )
        values = self._oauth_values(block, (*_OAUTH_KEYS[:-1], _ISSUER), _OAUTH_REQUIRED, "")
        token_url = values.get("token_url")
        if token_url is not None:
            parsed = urlparse(token_url)
            allowed = ("https",) if self.entry.get("type") == "https" else ("http", "https")
            if parsed.scheme not in allowed or not parsed.netloc:
                raise self.fail(f"'oauth.token_url' must be an {' or '.join(allowed)} URL, got {token_url!r}")
        issuer = self._issuer(values.get(_ISSUER))
        timeout = self._oauth_timeout(block)
        if any(values.get(key) is None for key in _OAUTH_REQUIRED) or any(
            key in block and values.get(key) is None for key in ("token_url", _ISSUER)
        ):
            return None  # a variable is unset (allow_unset): the shape is checked, nothing connects
        return OAuthConfig(
            client_id=str(values["client_id"]),
            client_secret=str(values["client_secret"]),
            token_url=token_url or "",
            scope=values.get("scope"),
            audience=values.get("audience"),
            timeout=float(timeout),
            issuer=issuer,
        )

    def _issuer(self, issuer: str | None) -> str | None:
        """``oauth.issuer``: an https URL (http on the loopback), no query or fragment (RFC 8414)."""
        if issuer is None:
            return None
        parsed = urlparse(issuer)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.query or parsed.fragment:
            raise self.fail(
                f"'oauth.issuer' must be the authorization server's issuer: an http(s) URL without a "
                f"query or #fragment, got {issuer!r}"
            )
        if parsed.scheme == "http" and parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise self.fail(
                "'oauth.issuer' must be https unless it is on the loopback: the client's credentials "
                f"go there; got {issuer!r}"
            )
        return issuer

    def _oauth_values(
        self, block: dict[str, Any], keys: Sequence[str], required: Collection[str], missing_note: str
    ) -> dict[str, str | None]:
        """The block's string values for ``keys``, expanded; None for a variable left unset."""
        values: dict[str, str | None] = {}
        for key in keys:
            if key not in block:
                if key in required:
                    raise self.fail(f"oauth: missing {key!r}{missing_note}")
                continue
            if block[key] is None:
                raise self.fail(f"'oauth.{key}' is empty")
            value = self._expanded(f"oauth.{key}", block[key])
            if value is not None and not value.strip():
                raise self.fail(f"'oauth.{key}' is empty")
            if value is not None and any(ord(char) < 32 or ord(char) == 127 for char in value):
                # The value stays out of the message: it may be a secret.
                raise self.fail(f"'oauth.{key}' contains a control character (a line break?)")
            values[key] = value
        return values

    def _oauth_timeout(self, block: dict[str, Any]) -> float:
        timeout = block.get("timeout", DEFAULT_OAUTH_TIMEOUT)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout < math.inf:
            raise self.fail("'oauth.timeout' must be a positive number of seconds")
        return float(timeout)

    def _person_oauth(self, block: dict[str, Any]) -> OAuthConfig | None:
        """``oauth`` with ``grant: authorization_code``: the person signs in (mcp_bridge.auth.person)."""
        unknown = [key for key in block if key not in _PERSON_KEYS]
        if unknown:
            reason = (
                ": the endpoints are discovered from the server's protected-resource metadata"
                if set(unknown) & {"token_url", "audience"}
                else ""
            )
            raise self.fail(
                f"oauth: unknown key(s) {_listed(unknown)} with grant {AUTHORIZATION_CODE}{reason}; it takes "
                f"{', '.join(_PERSON_KEYS)}"
            )
        values = self._oauth_values(
            block, _PERSON_KEYS[1:-1], _PERSON_REQUIRED, f" (grant {AUTHORIZATION_CODE})"
        )
        issuer = self._issuer(values.get(_ISSUER))
        redirect = values.get("redirect_uri")
        if redirect is not None:
            parsed = urlparse(redirect)
            loopback = parsed.hostname in ("127.0.0.1", "localhost", "::1")
            if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.fragment:
                raise self.fail(
                    f"'oauth.redirect_uri' must be an http(s) URL without a #fragment, got {redirect!r}"
                )
            if parsed.scheme == "http" and not loopback:
                raise self.fail(
                    "'oauth.redirect_uri' must be https unless it is on the loopback (RFC 8252): the "
                    f"authorization code travels in it; got {redirect!r}"
                )
        timeout = self._oauth_timeout(block)
        if any(values.get(key) is None for key in _PERSON_REQUIRED) or any(
            key in block and values.get(key) is None for key in ("client_secret", _ISSUER)
        ):
            return None  # a variable is unset (allow_unset): the shape is checked, nothing connects
        return OAuthConfig(
            client_id=str(values["client_id"]),
            client_secret=values.get("client_secret") or "",
            scope=values.get("scope"),
            timeout=float(timeout),
            grant=AUTHORIZATION_CODE,
            redirect_uri=redirect,
            issuer=issuer,
        )

    def _api_key_header(self) -> tuple[str, str]:
        entry = self.entry
        for key in ("header_name", "header_format"):
            if key in entry and "api_key" not in entry:
                reason = (
                    "a token is always sent as 'Authorization: Bearer <token>'; "
                    "use api_key to choose the header"
                    if "token" in entry
                    else "it says how the api_key is sent, and there is no api_key"
                )
                raise self.fail(f"{key!r} only goes with 'api_key': {reason}")
        header_name = self._literal("header_name", DEFAULT_HEADER_NAME)
        if not _HEADER_NAME.fullmatch(header_name):
            raise self.fail(
                f"'header_name' must be an HTTP header name (letters, digits, '-'), not {header_name!r}"
            )
        if header_name.lower() in _TRANSPORT_HEADERS:
            raise self.fail(
                f"'header_name': {header_name!r} is set by the MCP transport itself; choose another header"
            )
        header_format = self._literal("header_format", DEFAULT_HEADER_FORMAT)
        try:
            fields = list(string.Formatter().parse(header_format))
        except ValueError:
            fields = [("", "?", "", None)]  # a lone brace: reported below
        replaced = [(name, spec, conversion) for _, name, spec, conversion in fields if name is not None]
        if not replaced or any(item != ("key", "", None) for item in replaced):
            raise self.fail(
                f"'header_format' must contain {{key}}, where the api_key goes, and no other {{...}} "
                f"(write {{{{ or }}}} for a brace), not {header_format!r}"
            )
        if any(ord(char) < 32 or ord(char) == 127 for char in header_format):
            raise self.fail("'header_format' contains a control character, which no HTTP header can carry")
        return header_name, header_format

    def _literal(self, key: str, default: str) -> str:
        """``entry[key]``, a non-empty text written as is, or ``default`` when the key is absent."""
        return self._text(self.entry[key], repr(key)) if key in self.entry else default

    def _text(self, value: Any, place: str) -> str:
        """A non-empty string, sent as written: the bridge does not expand ``${...}`` in it."""
        if not isinstance(value, str):
            raise self.fail(f"{place} must be a string")
        if not value.strip():
            raise self.fail(f"{place} is empty")
        if "${" in value:
            raise self.fail(
                f"{place} is sent as written: ${{...}} is expanded only in url, token, api_key and oauth"
            )
        return value

    def _timeout(self) -> float:
        if "timeout" in self.entry and "tool_timeout" in self.entry:
            raise self.fail(
                "'tool_timeout' (Rasa Pro's name) and 'timeout' (the bridge's) are the same setting; "
                "keep tool_timeout"
            )
        key = "tool_timeout" if "tool_timeout" in self.entry else "timeout"
        value = self.entry.get(key, DEFAULT_TIMEOUT)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < math.inf:
            raise self.fail(f"{key!r} must be a positive number of seconds")
        return float(value)

    def _meta_map(self) -> tuple[tuple[tuple[str, str], ...], tuple[SlotMeta, ...]]:
        meta_map = self.entry.get("meta_map")
        if meta_map is None:
            return (), ()  # as in Rasa Pro, an empty meta_map sends nothing
        if not isinstance(meta_map, dict):
            raise self.fail("'meta_map' must be a mapping with static and/or from_slots")
        unknown = [key for key in meta_map if key not in _META_KEYS]
        if unknown:
            raise self.fail(f"meta_map: unknown key(s) {_listed(unknown)}; it takes static and from_slots")
        sent: dict[str, str] = {}  # _meta key -> where it is set

        def meta_key(value: Any, where: str) -> str:
            if not isinstance(value, str) or not value.strip():
                raise self.fail(f"{where} must be a non-empty string")
            if value in RESERVED_META:
                raise self.fail(f"{where}: {value!r} is reserved: {RESERVED_META[value]}")
            if value in sent:
                raise self.fail(f"{where}: {value!r} is already sent by {sent[value]}")
            sent[value] = where
            return value

        static_map = meta_map.get("static")
        if static_map is not None and not isinstance(static_map, dict):
            raise self.fail("meta_map.static must be a mapping of _meta keys to texts")
        static: list[tuple[str, str]] = []
        for key, value in (static_map or {}).items():
            where = f"meta_map.static.{key}"
            meta_key(key, f"{where} (its key)")
            static.append((key, self._text(value, where)))
        entries = meta_map.get("from_slots")
        if entries is not None and not isinstance(entries, list):
            raise self.fail("meta_map.from_slots must be a list of {slot: ..., param: ...}")
        from_slots: list[SlotMeta] = []
        for index, item in enumerate(entries or []):
            where = f"meta_map.from_slots[{index}]"
            if not isinstance(item, dict):
                raise self.fail(f"{where} must be a mapping {{slot: <slot name>, param: <_meta key>}}")
            unknown = [key for key in item if key not in _FROM_SLOTS_KEYS]
            if unknown:
                raise self.fail(f"{where}: unknown key(s) {_listed(unknown)}; it takes slot and param")
            for key in _FROM_SLOTS_KEYS:
                if key not in item:
                    raise self.fail(f"{where}: missing {key!r}")
            slot = item["slot"]
            if not isinstance(slot, str) or not slot.strip():
                raise self.fail(f"{where}.slot must be a non-empty string")
            from_slots.append(SlotMeta(slot=slot, param=meta_key(item["param"], f"{where}.param")))
        return tuple(static), tuple(from_slots)


def _listed(keys: list[Any]) -> str:
    return ", ".join(repr(key) for key in keys)
