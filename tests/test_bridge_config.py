"""Start-up checks of the bridge's ``mcp_servers`` configuration and of ``${VAR}`` expansion.

Every invalid file must be refused with a :class:`ConfigError` naming the file, the server and the
reason, and the api_key must never show up where a config gets printed.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mcp_bridge.config import MCPServerConfig, load_mcp_servers, parse_mcp_servers
from mcp_bridge.envsubst import UnsetVariableError, expand
from mcp_bridge.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
ENDPOINTS = REPO / "endpoints.yml"
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
    assert crm == MCPServerConfig(name="crm", url=DEFAULT_CRM_URL, type="http", api_key="t", trusted=True)
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
            token: abc
            header: x
        """,
    )
    assert load_error(path) == f"{path}: mcp_servers[0] (crm): unknown field(s) header, token"


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
    assert message.startswith(f"{path}: mcp_servers[0] (crm): unknown field")


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
