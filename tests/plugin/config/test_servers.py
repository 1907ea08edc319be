"""Start-up checks of the bridge's ``mcp_servers`` configuration and of ``${VAR}`` expansion.

Every invalid file must be refused with a :class:`ConfigError` naming the file, the server and the
reason, and the api_key must never show up where a config gets printed.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mcp_bridge.config.envsubst import UnsetVariableError, expand
from mcp_bridge.config.servers import MCPServerConfig, SlotMeta, load_mcp_servers, parse_mcp_servers
from mcp_bridge.errors import ConfigError
from tests.support.procs import EXAMPLE_BOT

BOT = EXAMPLE_BOT
ENDPOINTS = BOT / "endpoints.yml"
DEFAULT_CRM_URL = "http://127.0.0.1:8200/mcp"
SECRET = "s3cr3t-token-value"


def write(tmp_path: Path, text: str, name: str = "endpoints.yml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(path: Path, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_mcp_servers(path, env={} if env is None else env)
    return str(info.value)


# --- the repo's endpoints.yml -------------------------------------------------------------------


def test_real_endpoints_with_token_uses_default_url() -> None:
    servers = load_mcp_servers(ENDPOINTS, env={"CRM_MCP_TOKEN": "t"})
    assert list(servers) == ["crm"]
    crm = servers["crm"]
    assert crm == MCPServerConfig(
        name="crm", url=DEFAULT_CRM_URL, type="http", api_key="t", trusted=True, honours_idempotency_key=True
    )
    assert crm.headers() == {"Authorization": "Bearer t"}
    assert crm.trusted is True  # its read-only tools may skip the default confirmation
    assert crm.timeout == 10.0


def test_real_endpoints_url_from_environment_overrides_default() -> None:
    servers = load_mcp_servers(
        ENDPOINTS, env={"CRM_MCP_TOKEN": "t", "CRM_MCP_URL": "https://crm.example.com/mcp"}
    )
    assert servers["crm"].url == "https://crm.example.com/mcp"
    assert servers["crm"].api_key == "t"


def test_real_endpoints_without_token_names_file_server_and_variable() -> None:
    message = load_error(ENDPOINTS, env={"CRM_MCP_URL": "http://127.0.0.1:1/mcp"})
    assert message.startswith(f"{ENDPOINTS}: mcp_servers[0] (crm): ")
    assert "'api_key'" in message
    assert "${CRM_MCP_TOKEN}" in message
    assert "environment variable CRM_MCP_TOKEN is not set" in message


def test_env_none_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRM_MCP_TOKEN", "from-os-environ")
    monkeypatch.delenv("CRM_MCP_URL", raising=False)
    servers = load_mcp_servers(ENDPOINTS)
    assert servers["crm"].api_key == "from-os-environ"
    assert servers["crm"].url == DEFAULT_CRM_URL


# --- valid files --------------------------------------------------------------------------------


def test_all_fields(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - name: crm
            url: "https://crm.example.com/mcp"
            type: https
            api_key: "${TOKEN}"
            trusted: true
            timeout: 2.5
          - name: notes
            url: http://127.0.0.1:9000/mcp
            type: http
        """,
    )
    servers = load_mcp_servers(path, env={"TOKEN": "abc"})
    assert servers == {
        "crm": MCPServerConfig(
            name="crm",
            url="https://crm.example.com/mcp",
            type="https",
            api_key="abc",
            trusted=True,
            timeout=2.5,
        ),
        "notes": MCPServerConfig(name="notes", url="http://127.0.0.1:9000/mcp", type="http"),
    }
    assert servers["notes"].api_key is None
    assert servers["notes"].headers() == {}


def test_timeout_integer_is_accepted_as_float(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "http://h/mcp", type: http, timeout: 3}
        """,
    )
    timeout = load_mcp_servers(path, env={})["crm"].timeout
    assert timeout == 3.0
    assert isinstance(timeout, float)


@pytest.mark.parametrize(
    "text",
    [
        "action_endpoint:\n  url: http://127.0.0.1:5055/webhook\n",
        "mcp_servers:\n",
        "mcp_servers: []\n",
        "",
    ],
    ids=["no-key", "null", "empty-list", "empty-file"],
)
def test_no_servers_configured(tmp_path: Path, text: str) -> None:
    assert load_mcp_servers(write(tmp_path, text), env={}) == {}


def test_parse_mcp_servers_none_is_empty() -> None:
    assert parse_mcp_servers(None, source="x.yml", env={}) == {}


# --- secrets stay out of logs -------------------------------------------------------------------


def test_api_key_not_in_repr_or_str(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - name: crm
            url: "http://127.0.0.1:8200/mcp"
            type: http
            api_key: "${TOKEN}"
        """,
    )
    servers = load_mcp_servers(path, env={"TOKEN": SECRET})
    config = servers["crm"]
    assert config.api_key == SECRET
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert SECRET not in repr(servers)
    assert "api_key" not in repr(config)


def test_api_key_not_in_error_about_another_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - name: crm
            url: "ftp://127.0.0.1/mcp"
            type: http
            api_key: "${TOKEN}"
        """,
    )
    message = load_error(path, env={"TOKEN": SECRET})
    assert "url" in message
    assert SECRET not in message


# --- invalid files ------------------------------------------------------------------------------


def test_unset_variable_in_url_names_file_server_field_and_variable(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - name: billing
            url: "${BILLING_URL}"
            type: http
        """,
    )
    message = load_error(path)
    assert message.startswith(f"{path}: mcp_servers[0] (billing): ")
    assert "'url'" in message
    assert "environment variable BILLING_URL is not set" in message


def test_duplicate_server_names(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "http://a/mcp", type: http}
          - {name: crm, url: "http://b/mcp", type: http}
        """,
    )
    message = load_error(path)
    assert message == f"{path}: mcp_servers[1]: duplicate server name 'crm'"


def test_missing_name(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {url: "http://a/mcp", type: http}
        """,
    )
    assert load_error(path) == f"{path}: mcp_servers[0]: missing field 'name'"


def test_blank_name(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: "  ", url: "http://a/mcp", type: http}
        """,
    )
    assert load_error(path) == f"{path}: mcp_servers[0]: 'name' must be a non-empty string"


@pytest.mark.parametrize("field", ["url", "type"])
def test_missing_url_or_type(tmp_path: Path, field: str) -> None:
    entry = {"url": '"http://a/mcp"', "type": "http"}
    del entry[field]
    body = "".join(f"    {key}: {value}\n" for key, value in entry.items())
    path = write(tmp_path, f"mcp_servers:\n  - name: crm\n{body}")
    assert load_error(path) == f"{path}: mcp_servers[0] (crm): missing field '{field}'"


def test_empty_url(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "", type: http}
        """,
    )
    assert load_error(path) == f"{path}: mcp_servers[0] (crm): missing field 'url'"


@pytest.mark.parametrize("server_type", ["stdio", "HTTP", "sse"])
def test_bad_type(tmp_path: Path, server_type: str) -> None:
    path = write(
        tmp_path,
        f"""
        mcp_servers:
          - {{name: crm, url: "http://a/mcp", type: {server_type}}}
        """,
    )
    message = load_error(path)
    assert message.startswith(f"{path}: mcp_servers[0] (crm): ")
    assert "type must be one of http, https" in message
    assert repr(server_type) in message


def test_type_not_a_string(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "http://a/mcp", type: 5}
        """,
    )
    assert load_error(path) == f"{path}: mcp_servers[0] (crm): 'type' must be a string"


def test_https_type_refuses_http_url(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "http://crm.example.com/mcp", type: https}
        """,
    )
    message = load_error(path)
    assert message.startswith(f"{path}: mcp_servers[0] (crm): ")
    assert "url must be an https URL" in message
    assert "'http://crm.example.com/mcp'" in message


def test_http_type_accepts_https_url(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "https://crm.example.com/mcp", type: http}
        """,
    )
    assert load_mcp_servers(path, env={})["crm"].url == "https://crm.example.com/mcp"


@pytest.mark.parametrize("url", ["ftp://crm.example.com/mcp", "crm.example.com/mcp", "http://"])
def test_url_not_http(tmp_path: Path, url: str) -> None:
    path = write(
        tmp_path,
        f"""
        mcp_servers:
          - {{name: crm, url: "{url}", type: http}}
        """,
    )
    message = load_error(path)
    assert message.startswith(f"{path}: mcp_servers[0] (crm): ")
    assert "url must be an http or https URL" in message
    assert repr(url) in message


def test_unknown_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - name: crm
            url: "http://a/mcp"
            type: http
            tokn: abc
            header: x
        """,
    )
    assert load_error(path) == (
        f"{path}: mcp_servers[0] (crm): unknown key(s) 'tokn', 'header'; a server takes name, url, type, "
        "token, api_key, header_name, header_format, tool_timeout, meta_map, oauth (Rasa Pro's) and trusted, "
        "timeout, honours_idempotency_key, trace_context (the bridge's)"
    )


@pytest.mark.parametrize(
    ("value", "env"),
    [('""', {}), ('"  "', {}), ('"${TOKEN}"', {"TOKEN": ""})],
    ids=["empty", "blank", "variable-set-but-empty"],
)
def test_api_key_empty(tmp_path: Path, value: str, env: dict[str, str]) -> None:
    path = write(
        tmp_path,
        f"""
        mcp_servers:
          - name: crm
            url: "http://a/mcp"
            type: http
            api_key: {value}
        """,
    )
    assert load_error(path, env=env) == f"{path}: mcp_servers[0] (crm): 'api_key' is empty"


def test_api_key_not_a_string(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "http://a/mcp", type: http, api_key: 12345}
        """,
    )
    message = load_error(path)
    assert message == f"{path}: mcp_servers[0] (crm): 'api_key' must be a string"
    assert "12345" not in message


@pytest.mark.parametrize("value", ["yes please", "1"])
def test_trusted_not_a_bool(tmp_path: Path, value: str) -> None:
    path = write(
        tmp_path,
        f"""
        mcp_servers:
          - {{name: crm, url: "http://a/mcp", type: http, trusted: "{value}"}}
        """,
    )
    assert load_error(path) == f"{path}: mcp_servers[0] (crm): 'trusted' must be true or false"


@pytest.mark.parametrize("value", ["0", "-1", "true", '"10"'])
def test_timeout_not_positive_number(tmp_path: Path, value: str) -> None:
    path = write(
        tmp_path,
        f"""
        mcp_servers:
          - {{name: crm, url: "http://a/mcp", type: http, timeout: {value}}}
        """,
    )
    assert load_error(path) == f"{path}: mcp_servers[0] (crm): 'timeout' must be a positive number of seconds"


def test_file_not_found(tmp_path: Path) -> None:
    path = tmp_path / "missing.yml"
    assert load_error(path) == f"{path}: file not found"


def test_invalid_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "mcp_servers:\n  - name: [crm\n")
    message = load_error(path)
    assert message.startswith(f"{path}: not valid YAML: ")


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- name: crm\n")
    assert load_error(path) == f"{path}: expected a mapping at the top level"


@pytest.mark.parametrize("value", ["{name: crm}", "crm", "5"])
def test_mcp_servers_not_a_list(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"mcp_servers: {value}\n")
    assert load_error(path) == f"{path}: mcp_servers must be a list of servers"


def test_server_entry_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "mcp_servers:\n  - crm\n")
    message = load_error(path)
    assert message == f"{path}: mcp_servers[0]: each server must be a mapping with name, url and type"


def test_later_entry_reports_its_own_index(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "http://a/mcp", type: http}
          - {name: notes, url: "http://b/mcp", type: grpc}
        """,
    )
    assert load_error(path).startswith(f"{path}: mcp_servers[1] (notes): type must be one of")


# --- known bugs (expected good behaviour, failing today) ------------------------------------------


@pytest.mark.parametrize("key", ["on", "1"])
def test_non_string_key_is_a_config_error(tmp_path: Path, key: str) -> None:
    path = write(
        tmp_path,
        f"""
        mcp_servers:
          - name: crm
            url: "http://a/mcp"
            type: http
            {key}: true
        """,
    )
    message = load_error(path)
    assert message.startswith(f"{path}: mcp_servers[0] (crm): unknown key(s) ")


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yml"
    path.write_bytes("# café\nmcp_servers: []\n".encode("latin-1"))
    assert load_error(path).startswith(f"{path}: ")


def test_directory_instead_of_file_is_a_config_error(tmp_path: Path) -> None:
    assert load_error(tmp_path).startswith(f"{tmp_path}: ")


def test_timeout_nan_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: crm, url: "http://a/mcp", type: http, timeout: .nan}
        """,
    )
    assert "'timeout' must be a positive number of seconds" in load_error(path)


def test_name_not_a_string_says_so(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - {name: 5, url: "http://a/mcp", type: http}
        """,
    )
    message = load_error(path)
    assert "missing" not in message
    assert "'name' must be a non-empty string" in message


def test_empty_variable_uses_default_like_the_shell() -> None:
    servers = load_mcp_servers(ENDPOINTS, env={"CRM_MCP_TOKEN": "t", "CRM_MCP_URL": ""})
    assert servers["crm"].url == DEFAULT_CRM_URL


# --- envsubst -----------------------------------------------------------------------------------


def test_expand_set_variable() -> None:
    assert expand("Bearer ${TOKEN}", {"TOKEN": "abc"}) == "Bearer abc"


def test_expand_default_when_unset() -> None:
    assert expand("${URL:-http://127.0.0.1:8200/mcp}", {}) == "http://127.0.0.1:8200/mcp"


def test_expand_variable_beats_default() -> None:
    assert expand("${URL:-http://default/mcp}", {"URL": "http://env/mcp"}) == "http://env/mcp"


def test_expand_empty_default() -> None:
    assert expand("a${X:-}b", {}) == "ab"


def test_expand_several_variables() -> None:
    env = {"HOST": "crm.example.com", "PORT": "8200"}
    assert expand("https://${HOST}:${PORT}/${PATH:-mcp}", env) == "https://crm.example.com:8200/mcp"


@pytest.mark.parametrize("value", ["plain", "$TOKEN", "${}", "${1X}", "cost: $5"])
def test_expand_leaves_other_text_alone(value: str) -> None:
    assert expand(value, {"TOKEN": "abc", "1X": "no"}) == value


def test_expand_unset_variable_raises_with_name() -> None:
    with pytest.raises(UnsetVariableError) as info:
        expand("${SET} ${NOT_SET}", {"SET": "x"})
    assert info.value.name == "NOT_SET"
    assert isinstance(info.value, ValueError)


def test_expand_value_is_not_expanded_again() -> None:
    assert expand("${A}", {"A": "${B}", "B": "nested"}) == "${B}"


# --- Rasa Pro's keys: token, api_key with header_name / header_format, tool_timeout, meta_map -------

SERVER = 'mcp_servers:\n  - name: crm\n    url: "http://a/mcp"\n    type: http\n'


def server_with(tmp_path: Path, keys: str) -> Path:
    """An endpoints.yml whose one server has ``keys`` (YAML lines, dedented) besides name/url/type."""
    return write(tmp_path, SERVER + textwrap.indent(textwrap.dedent(keys).strip(), "    ") + "\n")


def crm_with(tmp_path: Path, keys: str, env: dict[str, str] | None = None) -> MCPServerConfig:
    return load_mcp_servers(server_with(tmp_path, keys), env={} if env is None else env)["crm"]


def test_token_is_sent_as_a_bearer_token(tmp_path: Path) -> None:
    crm = crm_with(tmp_path, 'token: "${TOKEN}"', {"TOKEN": SECRET})
    assert crm.token == SECRET and crm.api_key is None
    assert crm.headers() == {"Authorization": f"Bearer {SECRET}"}


def test_api_key_defaults_are_rasa_pros(tmp_path: Path) -> None:
    """Without header_name and header_format an api_key is a bearer token, as in Rasa Pro."""
    crm = crm_with(tmp_path, 'api_key: "${KEY}"', {"KEY": SECRET})
    assert (crm.header_name, crm.header_format) == ("Authorization", "Bearer {key}")
    assert crm.headers() == {"Authorization": f"Bearer {SECRET}"}


@pytest.mark.parametrize(
    ("keys", "headers"),
    [
        ("header_name: X-API-Key", {"X-API-Key": f"Bearer {SECRET}"}),
        ('header_name: X-API-Key\nheader_format: "{key}"', {"X-API-Key": SECRET}),
        ('header_format: "Token {key}"', {"Authorization": f"Token {SECRET}"}),
        (
            'header_format: "Key={key}; {{literal braces}}"',
            {"Authorization": f"Key={SECRET}; {{literal braces}}"},
        ),
    ],
    ids=["header_name", "name-and-bare-format", "format", "escaped-braces"],
)
def test_api_key_with_header_name_and_format(tmp_path: Path, keys: str, headers: dict[str, str]) -> None:
    crm = crm_with(tmp_path, f'api_key: "${{KEY}}"\n{keys}', {"KEY": SECRET})
    assert crm.headers() == headers


@pytest.mark.parametrize(("value", "seconds"), [("3", 3.0), ("0.25", 0.25), ("120", 120.0)])
def test_tool_timeout_is_the_calls_timeout_in_seconds(tmp_path: Path, value: str, seconds: float) -> None:
    crm = crm_with(tmp_path, f"tool_timeout: {value}")
    assert crm.timeout == seconds and isinstance(crm.timeout, float)


def test_meta_map_static_and_from_slots(tmp_path: Path) -> None:
    crm = crm_with(
        tmp_path,
        """
        meta_map:
          static: {source: rasa, api_version: "2"}
          from_slots:
            - {slot: user_id, param: user}
            - slot: tenant
              param: tenant_id
        """,
    )
    assert crm.meta_static == (("source", "rasa"), ("api_version", "2"))
    assert crm.meta_from_slots == (SlotMeta("user_id", "user"), SlotMeta("tenant", "tenant_id"))
    slots = {"user_id": "u-1", "tenant": "acme", "other": "x"}
    assert crm.call_meta(slots) == {"source": "rasa", "api_version": "2", "user": "u-1", "tenant_id": "acme"}
    assert crm.call_meta({"user_id": None}) == {"source": "rasa", "api_version": "2"}
    assert crm.call_meta(None) == {"source": "rasa", "api_version": "2"}


@pytest.mark.parametrize(
    "keys",
    [
        "meta_map:",
        "meta_map: {}",
        "meta_map: {static: {}}",
        "meta_map: {from_slots: []}",
        "meta_map: {static: null}",
    ],
)
def test_an_empty_meta_map_sends_nothing(tmp_path: Path, keys: str) -> None:
    """Rasa Pro accepts these too (every part of meta_map is optional)."""
    crm = crm_with(tmp_path, keys)
    assert crm.call_meta({"user_id": "u-1"}) == {}


def test_every_key_together(tmp_path: Path) -> None:
    crm = crm_with(
        tmp_path,
        """
        api_key: "${KEY}"
        header_name: X-API-Key
        header_format: "{key}"
        tool_timeout: 4
        meta_map: {static: {source: rasa}, from_slots: [{slot: user_id, param: user}]}
        trusted: true
        """,
        {"KEY": SECRET},
    )
    assert crm.timeout == 4.0 and crm.trusted
    assert crm.headers() == {"X-API-Key": SECRET}
    assert SECRET not in repr(crm)


# Each: the server's keys, and the message after "<file>: mcp_servers[0] (crm): ".
REFUSED = {
    # token and api_key: non-empty strings, one of them
    "token-not-a-string": ("token: 12345", "'token' must be a string"),
    "token-empty": ('token: ""', "'token' is empty"),
    "token-blank": ('token: "  "', "'token' is empty"),
    "token-null": ("token:", "'token' is empty"),
    "token-line-break": (
        'token: "abc\\r\\nX-Evil: 1"',
        "'token' contains a control character (a line break?), which no HTTP header can carry",
    ),
    "api_key-null": ("api_key:", "'api_key' is empty"),
    "api_key-line-break": (
        'api_key: "abc\\nd"',
        "'api_key' contains a control character (a line break?), which no HTTP header can carry",
    ),
    "token-and-api_key": (
        'token: "a"\napi_key: "b"',
        "'token' and 'api_key' are two ways to authenticate; give one (a token is sent as "
        "'Authorization: Bearer <token>'; an api_key as header_name / header_format say)",
    ),
    # header_name
    "header_name-without-api_key": (
        "header_name: X-API-Key",
        "'header_name' only goes with 'api_key': it says how the api_key is sent, and there is no api_key",
    ),
    "header_name-with-token": (
        'token: "t"\nheader_name: X-API-Key',
        "'header_name' only goes with 'api_key': a token is always sent as 'Authorization: Bearer <token>'; "
        "use api_key to choose the header",
    ),
    "header_name-not-a-string": ('api_key: "k"\nheader_name: 5', "'header_name' must be a string"),
    "header_name-empty": ('api_key: "k"\nheader_name: ""', "'header_name' is empty"),
    "header_name-not-a-header": (
        'api_key: "k"\nheader_name: "X API Key"',
        "'header_name' must be an HTTP header name (letters, digits, '-'), not 'X API Key'",
    ),
    "header_name-of-the-transport": (
        'api_key: "k"\nheader_name: Content-Type',
        "'header_name': 'Content-Type' is set by the MCP transport itself; choose another header",
    ),
    "header_name-variable": (
        'api_key: "k"\nheader_name: "${HEADER}"',
        "'header_name' is sent as written: ${...} is expanded only in url, token, api_key and oauth",
    ),
    # header_format
    "header_format-without-api_key": (
        'header_format: "{key}"',
        "'header_format' only goes with 'api_key': it says how the api_key is sent, and there is no api_key",
    ),
    "header_format-not-a-string": ('api_key: "k"\nheader_format: 5', "'header_format' must be a string"),
    "header_format-empty": ('api_key: "k"\nheader_format: ""', "'header_format' is empty"),
    **{
        f"header_format-{name}": (
            f"api_key: \"k\"\nheader_format: '{value}'",
            "'header_format' must contain {key}, where the api_key goes, and no other {...} (write {{ or }} "
            f"for a brace), not {value!r}",
        )
        for name, value in [
            ("without-key", "Bearer"),
            ("other-field", "Bearer {token}"),
            ("key-and-other", "{key} {user}"),
            ("conversion", "{key!r}"),
            ("format-spec", "{key:>40}"),
            ("attribute", "{key.upper}"),
            ("positional", "Bearer {}"),
            ("lone-brace", "Bearer {key"),
        ]
    },
    # tool_timeout, and the bridge's timeout
    **{
        f"tool_timeout-{name}": (
            f"tool_timeout: {value}",
            "'tool_timeout' must be a positive number of seconds",
        )
        for name, value in [
            ("zero", "0"),
            ("negative", "-1"),
            ("bool", "true"),
            ("text", '"10"'),
            ("nan", ".nan"),
            ("inf", ".inf"),
            ("null", ""),
        ]
    },
    "tool_timeout-and-timeout": (
        "tool_timeout: 5\ntimeout: 5",
        "'tool_timeout' (Rasa Pro's name) and 'timeout' (the bridge's) are the same setting; "
        "keep tool_timeout",
    ),
    # meta_map
    "meta_map-text": ("meta_map: user_id", "'meta_map' must be a mapping with static and/or from_slots"),
    "meta_map-list": ("meta_map: [static]", "'meta_map' must be a mapping with static and/or from_slots"),
    "meta_map-unknown-key": (
        "meta_map: {static: {a: b}, dynamic: {}}",
        "meta_map: unknown key(s) 'dynamic'; it takes static and from_slots",
    ),
    "static-list": ("meta_map: {static: [a, b]}", "meta_map.static must be a mapping of _meta keys to texts"),
    "static-value-number": (
        "meta_map: {static: {api_version: 2}}",
        "meta_map.static.api_version must be a string",
    ),
    "static-value-empty": ('meta_map: {static: {source: ""}}', "meta_map.static.source is empty"),
    "static-value-null": ("meta_map: {static: {source: }}", "meta_map.static.source must be a string"),
    "static-value-variable": (
        'meta_map: {static: {source: "${SOURCE}"}}',
        "meta_map.static.source is sent as written: ${...} is expanded only in url, token, api_key and oauth",
    ),
    "static-key-empty": (
        'meta_map: {static: {"": x}}',
        "meta_map.static. (its key) must be a non-empty string",
    ),
    "static-key-number": (
        "meta_map: {static: {1: x}}",
        "meta_map.static.1 (its key) must be a non-empty string",
    ),
    "static-idempotency_key": (
        "meta_map: {static: {idempotency_key: x}}",
        "meta_map.static.idempotency_key (its key): 'idempotency_key' is reserved: the bridge sends a "
        "confirmed write's idempotency key under it",
    ),
    "static-progressToken": (
        "meta_map: {static: {progressToken: x}}",
        "meta_map.static.progressToken (its key): 'progressToken' is reserved: MCP's own progress token "
        "goes there",
    ),
    "from_slots-mapping": (
        "meta_map: {from_slots: {user_id: user}}",
        "meta_map.from_slots must be a list of {slot: ..., param: ...}",
    ),
    "from_slots-entry-text": (
        "meta_map: {from_slots: [user_id]}",
        "meta_map.from_slots[0] must be a mapping {slot: <slot name>, param: <_meta key>}",
    ),
    "from_slots-missing-param": (
        "meta_map: {from_slots: [{slot: user_id}]}",
        "meta_map.from_slots[0]: missing 'param'",
    ),
    "from_slots-missing-slot": (
        "meta_map: {from_slots: [{param: user}]}",
        "meta_map.from_slots[0]: missing 'slot'",
    ),
    "from_slots-unknown-key": (
        "meta_map: {from_slots: [{slot: user_id, param: user, default: x}]}",
        "meta_map.from_slots[0]: unknown key(s) 'default'; it takes slot and param",
    ),
    "from_slots-slot-empty": (
        'meta_map: {from_slots: [{slot: "", param: user}]}',
        "meta_map.from_slots[0].slot must be a non-empty string",
    ),
    "from_slots-slot-number": (
        "meta_map: {from_slots: [{slot: 5, param: user}]}",
        "meta_map.from_slots[0].slot must be a non-empty string",
    ),
    "from_slots-param-empty": (
        'meta_map: {from_slots: [{slot: user_id, param: " "}]}',
        "meta_map.from_slots[0].param must be a non-empty string",
    ),
    "from_slots-param-twice": (
        "meta_map: {from_slots: [{slot: a, param: user}, {slot: b, param: user}]}",
        "meta_map.from_slots[1].param: 'user' is already sent by meta_map.from_slots[0].param",
    ),
    "from_slots-param-also-static": (
        "meta_map: {static: {user: x}, from_slots: [{slot: user_id, param: user}]}",
        "meta_map.from_slots[0].param: 'user' is already sent by meta_map.static.user (its key)",
    ),
    "from_slots-param-idempotency_key": (
        "meta_map: {from_slots: [{slot: user_id, param: idempotency_key}]}",
        "meta_map.from_slots[0].param: 'idempotency_key' is reserved: the bridge sends a confirmed write's "
        "idempotency key under it",
    ),
    # oauth: Rasa Pro's client credentials block
    "oauth-and-token": (
        "token: t\noauth: {client_id: a, client_secret: b, token_url: 'https://auth/token'}",
        "'oauth' and 'token' are two ways to authenticate; give one (oauth gets a token from the "
        "token_url for each session; 'token' is sent as it is)",
    ),
    "oauth-and-api_key": (
        "api_key: k\noauth: {client_id: a, client_secret: b, token_url: 'https://auth/token'}",
        "'oauth' and 'api_key' are two ways to authenticate; give one (oauth gets a token from the "
        "token_url for each session; 'api_key' is sent as it is)",
    ),
    "oauth-not-a-mapping": (
        "oauth: yes",
        "'oauth' must be a mapping with client_id and client_secret",
    ),
    "oauth-unknown-grant": (
        "oauth: {client_id: a, client_secret: b, token_url: 'https://auth/token', grant: x}",
        "'oauth.grant' must be client_credentials (the bridge's own identity) or authorization_code "
        "(acting as the person in the conversation), not 'x'",
    ),
    "person-oauth-token-url": (
        "oauth: {grant: authorization_code, client_id: a, redirect_uri: 'http://127.0.0.1:5055/cb', "
        "token_url: 'https://auth/token'}",
        "oauth: unknown key(s) 'token_url' with grant authorization_code: the endpoints are discovered "
        "from the server's protected-resource metadata; it takes grant, client_id, client_secret, scope, "
        "redirect_uri, issuer, timeout",
    ),
    "person-oauth-no-redirect": (
        "oauth: {grant: authorization_code, client_id: a}",
        "oauth: missing 'redirect_uri' (grant authorization_code)",
    ),
    "person-oauth-plain-http-redirect": (
        "oauth: {grant: authorization_code, client_id: a, redirect_uri: 'http://bot.example.com/cb'}",
        "'oauth.redirect_uri' must be https unless it is on the loopback (RFC 8252): the authorization "
        "code travels in it; got 'http://bot.example.com/cb'",
    ),
    "oauth-unknown-key": (
        "oauth: {client_id: a, client_secret: b, token_url: 'https://auth/token', grant_type: x}",
        "oauth: unknown key(s) 'grant_type'; it takes client_id, client_secret, token_url, scope, audience, "
        "timeout, issuer",
    ),
    "oauth-issuer-not-a-url": (
        "oauth: {client_id: a, client_secret: b, issuer: 'auth.example.com'}",
        "'oauth.issuer' must be the authorization server's issuer: an http(s) URL without a query or "
        "#fragment, got 'auth.example.com'",
    ),
    "oauth-issuer-with-query": (
        "oauth: {client_id: a, client_secret: b, issuer: 'https://auth.example.com/?tenant=1'}",
        "'oauth.issuer' must be the authorization server's issuer: an http(s) URL without a query or "
        "#fragment, got 'https://auth.example.com/?tenant=1'",
    ),
    "person-oauth-plain-http-issuer": (
        "oauth: {grant: authorization_code, client_id: a, redirect_uri: 'http://127.0.0.1:5055/cb', "
        "issuer: 'http://auth.example.com'}",
        "'oauth.issuer' must be https unless it is on the loopback: the client's credentials go there; "
        "got 'http://auth.example.com'",
    ),
    "oauth-no-secret": (
        "oauth: {client_id: a, token_url: 'https://auth/token'}",
        "oauth: missing 'client_secret'",
    ),
    "oauth-empty-id": (
        "oauth: {client_id: ' ', client_secret: b, token_url: 'https://auth/token'}",
        "'oauth.client_id' is empty",
    ),
    "oauth-token_url-not-a-url": (
        "oauth: {client_id: a, client_secret: b, token_url: 'auth/token'}",
        "'oauth.token_url' must be an http or https URL, got 'auth/token'",
    ),
    "oauth-timeout": (
        "oauth: {client_id: a, client_secret: b, token_url: 'https://auth/token', timeout: 0}",
        "'oauth.timeout' must be a positive number of seconds",
    ),
    "oauth-header_name": (
        "header_name: X\noauth: {client_id: a, client_secret: b, token_url: 'https://auth/token'}",
        "'header_name' only goes with 'api_key': it says how the api_key is sent, and there is no api_key",
    ),
    # Rasa Pro's keys the bridge does not do
    "module": (
        "module: my.Auth",
        "module: Rasa Pro's custom authentication class is not supported; use token or api_key",
    ),
    "pre_call_hook": (
        "pre_call_hook: my.hook",
        "pre_call_hook: Rasa Pro's call-time credential hook is not supported; use meta_map for _meta",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_bad_value_is_refused_naming_file_server_and_key(tmp_path: Path, case: str) -> None:
    keys, reason = REFUSED[case]
    path = server_with(tmp_path, keys)
    assert (
        load_error(path, env={"SOURCE": "x", "HEADER": "X-Key"}) == f"{path}: mcp_servers[0] (crm): {reason}"
    )


@pytest.mark.parametrize("key", ["token", "api_key"])
def test_a_secret_is_not_in_the_message_about_it(tmp_path: Path, key: str) -> None:
    message = load_error(server_with(tmp_path, f'{key}: "${{S}}"'), env={"S": SECRET + "\n"})
    assert "control character" in message and SECRET not in message
    message = load_error(server_with(tmp_path, f'{key}: "${{S}}"\ntool_timeout: 0'), env={"S": SECRET})
    assert "tool_timeout" in message and SECRET not in message


def test_oauth_block_with_variables(tmp_path: Path) -> None:
    block = (
        'oauth:\n  client_id: "${ID}"\n  client_secret: "${SECRET}"\n  token_url: "${AUTH}/token"\n'
        "  scope: crm.notes\n  audience: https://crm.example.com\n  timeout: 3"
    )
    crm = crm_with(tmp_path, block, {"ID": "bridge", "SECRET": SECRET, "AUTH": "https://auth.example.com"})
    assert crm.oauth is not None
    assert (crm.oauth.client_id, crm.oauth.client_secret) == ("bridge", SECRET)
    assert crm.oauth.token_url == "https://auth.example.com/token"
    assert (crm.oauth.scope, crm.oauth.audience, crm.oauth.timeout) == (
        "crm.notes",
        "https://crm.example.com",
        3.0,
    )
    assert crm.headers() == {}  # the token comes from the flow, not from a header of the config
    assert SECRET not in repr(crm) and SECRET not in repr(crm.oauth)


def test_oauth_without_token_url_discovers_it_and_an_issuer_pins_the_server(tmp_path: Path) -> None:
    block = 'oauth: {client_id: a, client_secret: "${S}", issuer: "${ISSUER}"}'
    crm = crm_with(tmp_path, block, {"S": SECRET, "ISSUER": "https://auth.example.com"})
    assert crm.oauth is not None
    assert (crm.oauth.token_url, crm.oauth.issuer) == ("", "https://auth.example.com")
    assert crm.auth_description() == (
        "oauth client credentials (client_id a, token_url discovered, issuer https://auth.example.com)"
    )
    person = crm_with(
        tmp_path,
        "oauth: {grant: authorization_code, client_id: a, redirect_uri: 'http://127.0.0.1:5055/cb', "
        "issuer: 'http://127.0.0.1:8300'}",
    )
    assert person.oauth is not None and person.oauth.issuer == "http://127.0.0.1:8300"
    assert "issuer http://127.0.0.1:8300" in person.auth_description()


def test_oauth_secret_unset_and_bad_is_named_not_shown(tmp_path: Path) -> None:
    block = 'oauth: {client_id: a, client_secret: "${S}", token_url: "https://auth/token"}'
    path = server_with(tmp_path, block)
    assert load_error(path) == (
        f"{path}: mcp_servers[0] (crm): 'oauth.client_secret' uses ${{S}}, but the environment variable S "
        "is not set"
    )
    message = load_error(path, env={"S": SECRET + "\n"})
    assert "control character" in message and SECRET not in message
    shape = load_mcp_servers(path, env={}, allow_unset=True)["crm"]
    assert shape.oauth is None and shape.unset == (("oauth.client_secret", "S"),)


def test_token_not_in_repr(tmp_path: Path) -> None:
    crm = crm_with(tmp_path, 'token: "${T}"', {"T": SECRET})
    assert SECRET not in repr(crm) and "token=" not in repr(crm)


# --- unset variables: the offline check reads the shape, the action server needs the values ------


def test_unset_token_names_file_server_and_variable(tmp_path: Path) -> None:
    path = server_with(tmp_path, 'token: "${CRM_TOKEN}"')
    assert load_error(path) == (
        f"{path}: mcp_servers[0] (crm): 'token' uses ${{CRM_TOKEN}}, but the environment variable CRM_TOKEN "
        "is not set"
    )


def test_allow_unset_reads_the_shape_and_records_the_variables(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        mcp_servers:
          - name: crm
            url: "https://${CRM_HOST}/mcp"
            type: https
            api_key: "${CRM_KEY}"
            header_name: X-API-Key
          - name: notes
            url: "${NOTES_URL:-http://127.0.0.1:9000/mcp}"
            type: http
            token: "${NOTES_TOKEN}"
        """,
    )
    servers = load_mcp_servers(path, env={"NOTES_TOKEN": SECRET}, allow_unset=True)
    crm, notes = servers["crm"], servers["notes"]
    assert crm.url == "https://${CRM_HOST}/mcp" and crm.api_key is None and crm.headers() == {}
    assert crm.variables == ("CRM_HOST", "CRM_KEY")
    assert crm.unset == (("url", "CRM_HOST"), ("api_key", "CRM_KEY"))
    assert crm.unset_message() == (
        f"{path}: mcp_servers[0] (crm): 'url' uses ${{CRM_HOST}}, but the environment variable CRM_HOST "
        "is not set"
    )
    with pytest.raises(ConfigError, match="CRM_HOST"):
        crm.require_values()
    assert notes.variables == ("NOTES_TOKEN",) and notes.unset == () and notes.unset_message() is None
    assert notes.token == SECRET
    # Without allow_unset, the first unset variable stops the start.
    assert load_error(path, env={"NOTES_TOKEN": SECRET}) == crm.unset_message()


def test_allow_unset_still_checks_everything_else(tmp_path: Path) -> None:
    path = server_with(tmp_path, 'token: "${T}"\nheader_name: X-Key')
    with pytest.raises(ConfigError, match="'header_name' only goes with 'api_key'"):
        load_mcp_servers(path, env={}, allow_unset=True)
    path = write(tmp_path, 'mcp_servers:\n  - {name: crm, url: "${URL}", type: "${TYPE}"}\n')
    with pytest.raises(ConfigError, match=r"'type' uses \$\{TYPE\}"):
        load_mcp_servers(path, env={}, allow_unset=True)
