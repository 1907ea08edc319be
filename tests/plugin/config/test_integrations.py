"""Rasa Pro Mantle's ``integrations.yml``: its ``mcp_servers`` read as Mantle reads them
(mcp_bridge/config/servers.py), ``type`` taken from the url as written; Rasa Pro's own template's entry
loads. In Rasa Pro's environment the entries are also put through Mantle's own reader."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from mcp_bridge.config.servers import load_mcp_servers
from mcp_bridge.errors import ConfigError

# The entry Rasa Pro 3.21's project template (rasa/cli/project_templates/mantle/integrations.yml) shows,
# commented out, with its commented keys in.
TEMPLATE_ENTRY = textwrap.dedent(
    """\
    mcp_servers:
      - name: banking
        url: http://localhost:8000/mcp/
        token: ${MCP_BANKING_TOKEN}
        tool_timeout: 30
        meta_map:
          static:
            source: "rasa_agent"
    """
)


def write(tmp_path: Path, text: str, name: str = "integrations.yml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_rasa_pros_template_entry_loads_its_type_taken_from_the_url(tmp_path: Path) -> None:
    servers = load_mcp_servers(write(tmp_path, TEMPLATE_ENTRY), env={"MCP_BANKING_TOKEN": "t0ken"})
    banking = servers["banking"]
    assert (banking.type, banking.url, banking.timeout) == ("http", "http://localhost:8000/mcp/", 30.0)
    assert banking.headers() == {"Authorization": "Bearer t0ken"}
    assert banking.call_meta() == {"source": "rasa_agent"}


def test_an_https_url_is_an_https_server_and_a_type_given_is_kept(tmp_path: Path) -> None:
    text = (
        "mcp_servers:\n"
        "  - {name: a.b-c, url: 'https://${CRM_HOST}/mcp', api_key: '${KEY}'}\n"
        "  - {name: d, url: 'http://127.0.0.1:9/mcp', type: https}\n"
    )
    with pytest.raises(ConfigError, match=r"mcp_servers\[1\] \(d\): url must be an https URL"):
        load_mcp_servers(write(tmp_path, text), env={"CRM_HOST": "crm.example.com", "KEY": "k"})
    servers = load_mcp_servers(
        write(tmp_path, text.split("  - {name: d")[0]), env={"CRM_HOST": "h", "KEY": "k"}
    )
    assert (servers["a.b-c"].type, servers["a.b-c"].url) == ("https", "https://h/mcp")


def test_endpoints_yml_still_needs_its_type(tmp_path: Path) -> None:
    # Rasa Pro's endpoints.yml (MCPServerConfig) requires type; only Mantle's file infers it.
    path = write(tmp_path, TEMPLATE_ENTRY, name="endpoints.yml")
    with pytest.raises(ConfigError) as info:
        load_mcp_servers(path, env={"MCP_BANKING_TOKEN": "t"})
    assert str(info.value) == f"{path}: mcp_servers[0] (banking): missing field 'type'"


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (
            "{name: crm, url: '${CRM_MCP_URL}'}",
            "url must begin with http:// or https:// as written, got '${CRM_MCP_URL}': Rasa Pro reads "
            "integrations.yml without expanding ${...}",
        ),
        ("{name: crm, url: 'ftp://crm/mcp'}", "url must begin with http:// or https:// as written"),
        ("{name: crm}", "missing field 'url'"),
        ("{name: 'my crm', url: 'http://crm/mcp'}", "'name' must be letters, digits, '_', '.' and '-'"),
        (
            "{name: crm, url: 'http://crm/mcp', token: s3cret}",
            "'token' must be written as ${VARIABLE} in integrations.yml: Rasa Pro refuses a secret "
            "written out",
        ),
        (
            "{name: crm, url: 'http://crm/mcp', api_key: 'abc${X}'}",
            "'api_key' must be written as ${VARIABLE}",
        ),
        (
            "{name: crm, url: 'http://crm/mcp', oauth: {client_id: c, client_secret: s, token_url: 'http://a/t'}}",
            "'oauth.client_secret' must be written as ${VARIABLE}",
        ),
        (
            "{name: crm, url: 'http://crm/mcp', meta_map: {from_slots: [{slot: user_id, param: user}]}}",
            "meta_map.from_slots: Rasa Pro refuses it in integrations.yml",
        ),
        (
            "{name: crm, url: 'http://crm/mcp', pre_call_hook: hooks.sign}",
            "pre_call_hook: Rasa Pro's call-time",
        ),
        (
            "{name: crm, url: 'http://crm/mcp', protocol_version: '2025-06-18'}",
            "unknown key(s) 'protocol_version'",
        ),
    ],
)
def test_what_mantle_refuses_in_integrations_yml_is_refused(tmp_path: Path, entry: str, reason: str) -> None:
    path = write(tmp_path, f"mcp_servers:\n  - {entry}\n")
    with pytest.raises(ConfigError) as info:
        load_mcp_servers(path, env={"X": "x", "CRM_MCP_URL": "http://crm/mcp"})
    name = yaml.safe_load(entry)["name"]
    assert str(info.value).startswith(f"{path}: mcp_servers[0] ({name}): {reason}")


def _template() -> str:
    rasa = pytest.importorskip(
        "rasa", reason="Rasa Pro's template file comes with rasa-pro (make pytest-pro)"
    )
    path = Path(rasa.__file__).parent / "cli" / "project_templates" / "mantle" / "integrations.yml"
    if not path.is_file():
        pytest.skip(f"{path}: no Mantle project template in this rasa (Rasa Pro 3.21 has one)")
    return path.read_text(encoding="utf-8")


def test_rasa_pros_own_template_file_uncommented_loads_as_mantle_reads_it(tmp_path: Path) -> None:
    template = _template()
    lines = template.splitlines()
    start = lines.index("# mcp_servers:")
    block = [re.sub(r"^# ?", "", line) for line in lines[start:] if line.startswith("#")]
    block = [re.sub(r"^(\s+)# ", r"\1", line) for line in block]  # the keys commented inside the entry
    uncommented = "\n".join(lines[:start] + block) + "\n"
    path = write(tmp_path, uncommented)
    document = yaml.safe_load(uncommented)
    assert document["mcp_servers"][0]["name"] == "banking" and "type" not in document["mcp_servers"][0]
    servers = load_mcp_servers(path, env={"MCP_BANKING_TOKEN": "t"})
    assert servers["banking"].type == "http"
    assert servers["banking"].timeout == 30.0 and servers["banking"].call_meta() == {"source": "rasa_agent"}

    from rasa.mantle.config.mcp import parse_mcp_servers as mantle_parse

    assert mantle_parse(document["mcp_servers"]).servers["banking"].type == servers["banking"].type


ENTRIES = [
    "{name: a, url: 'http://h/mcp'}",
    "{name: a, url: 'https://h/mcp', token: '${T}', tool_timeout: 5}",
    "{name: a.b, url: 'HTTPS://h/mcp', api_key: '${K}', header_name: X-Key, header_format: '{key}'}",
    "{name: a, url: 'http://${H}/mcp', type: http}",
    "{name: a, url: 'http://h', oauth: {client_id: c, client_secret: '${S}', token_url: 'http://a/t'}}",
    "{name: a, url: 'http://h', meta_map: {static: {source: rasa}}}",
    "{name: a, url: '${U}'}",
    "{name: a, url: 'http://h', token: t}",
    "{name: a, url: 'http://h', meta_map: {from_slots: [{slot: s, param: p}]}}",
    "{name: -a, url: 'http://h'}",
    "{name: a, url: 'ftp://h'}",
    "{name: a, url: 'http://h', pre_call_hook: x.y}",
]


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_entry_the_plugin_reads_mantle_reads_with_the_same_type(tmp_path: Path, entry: str) -> None:
    mcp = pytest.importorskip("rasa.mantle.config.mcp", reason="needs rasa-pro's reader (make pytest-pro)")
    raw = yaml.safe_load(entry)
    try:
        ours = load_mcp_servers(
            write(tmp_path, f"mcp_servers:\n  - {entry}\n"), env={"H": "h", "U": "http://u"}
        )
    except ConfigError:
        return
    theirs = mcp.parse_mcp_servers([raw]).servers[raw["name"]]
    assert theirs.type == ours[raw["name"]].type
