"""The files the proof's processes read: skill files with only their tool-source lines changed, and
an endpoints file with one more MCP server.

The skill variants are made from the repository's own skills/ so that, between the phases, the
tool-source lines are the only difference (checked after each rewrite). A variant may put the Mantle
twin of log_interaction (examples/crm_bot/mantle/skills/log_interaction/: skill.md and its sidecar)
in place of its YAML file, its ``import_tools`` lines rewritten the same way.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from tests.support import procs

SKILLS = procs.EXAMPLE_BOT / "skills"
MANTLE_TWIN = procs.EXAMPLE_BOT / "mantle" / "skills" / "log_interaction"
_TOOLS_KEY = re.compile(r"^tools:\s*(#.*)?$")
_IMPORTS_KEY = re.compile(r"^import_tools:\s*(#.*)?$")
_IMPORT_LINE = re.compile(r"^(?P<indent>\s+- )(?:mcp/(?P<server>[\w.-]+):)?(?P<tool>[A-Za-z_]\w*)\s*(#.*)?$")
_TOOL_LINE = re.compile(r"^(?P<indent>\s+)(?P<tool>[A-Za-z_]\w*):\s*(?P<source>local|mcp:[\w.-]+)\s*(#.*)?$")

# skill id, tool name -> tool-source line value ("local" or "mcp:<server>")
SourceChooser = Callable[[str, str], str]


def rewrite_tool_sources(text: str, skill_id: str, choose: SourceChooser) -> str:
    """``text`` with each line under ``tools:`` set to ``choose(skill, tool)``; nothing else changes."""
    lines: list[str] = []
    in_tools = False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if _TOOLS_KEY.match(body):
            in_tools = True
        elif in_tools and body and not body[0].isspace() and not body.startswith("#"):
            in_tools = False
        elif in_tools and (match := _TOOL_LINE.match(body)):
            newline = line[len(body) :]
            line = f"{match['indent']}{match['tool']}: {choose(skill_id, match['tool'])}{newline}"
        lines.append(line)
    return "".join(lines)


def _import_entry(tool: str, source: str) -> str:
    """The ``import_tools`` entry for ``tool`` from ``source``: ``mcp/<server>:<tool>`` or ``<tool>``."""
    return tool if source == "local" else f"mcp/{source.removeprefix('mcp:')}:{tool}"


def rewrite_imports(text: str, skill_id: str, choose: SourceChooser) -> str:
    """A Mantle ``skill.md``'s ``text`` with each line under ``import_tools:`` written for
    ``choose(skill, tool)``; nothing else changes."""
    lines: list[str] = []
    in_imports = False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if _IMPORTS_KEY.match(body):
            in_imports = True
        elif in_imports and body and not body[0].isspace() and not body.startswith("#"):
            in_imports = False
        elif in_imports and (match := _IMPORT_LINE.match(body)):
            entry = _import_entry(match["tool"], choose(skill_id, match["tool"]))
            line = f"{match['indent']}{entry}{line[len(body) :]}"
        lines.append(line)
    return "".join(lines)


def write_mantle_twin(dest: Path, choose: SourceChooser, twin: Path = MANTLE_TWIN) -> Path:
    """The Mantle twin's folder in ``dest``, its ``import_tools`` lines rewritten (checked: the front
    matter differs in them only, the body not at all)."""
    folder = dest / twin.name
    shutil.copytree(twin, folder, dirs_exist_ok=True)
    original = (twin / "skill.md").read_text(encoding="utf-8")
    rewritten = rewrite_imports(original, twin.name, choose)
    (_, front, body), (_, new_front, new_body) = original.split("---", 2), rewritten.split("---", 2)
    before, after = yaml.safe_load(front), yaml.safe_load(new_front)
    tools = [str(entry).rpartition(":")[2] for entry in before["import_tools"]]
    expected = [_import_entry(tool, choose(twin.name, tool)) for tool in tools]
    if after != {**before, "import_tools": expected} or body != new_body:
        raise RuntimeError(f"{twin}: rewriting the import_tools lines changed more than those lines")
    (folder / "skill.md").write_text(rewritten, encoding="utf-8")
    return dest


def write_skills(dest: Path, choose: SourceChooser, source: Path = SKILLS, *, mantle: bool = False) -> Path:
    """Copy every skill file of ``source`` to ``dest`` with its tool-source lines rewritten; with
    ``mantle``, the Mantle twin of log_interaction instead of its YAML file."""
    dest.mkdir(parents=True, exist_ok=True)
    if mantle:
        write_mantle_twin(dest, choose)
    for path in sorted(source.glob("*.yml")):
        if mantle and path.stem == MANTLE_TWIN.name:
            continue
        original = path.read_text(encoding="utf-8")
        before = yaml.safe_load(original)
        rewritten = rewrite_tool_sources(original, str(before["skill"]), choose)
        after = yaml.safe_load(rewritten)
        expected_tools = {tool: choose(before["skill"], tool) for tool in before["tools"]}
        if after != {**before, "tools": expected_tools}:
            raise RuntimeError(f"{path}: rewriting the tool-source lines changed more than those lines")
        (dest / path.name).write_text(rewritten, encoding="utf-8")
    return dest


def every_tool(source: str) -> SourceChooser:
    return lambda skill, tool: source


def overrides(default: str, by_skill: Mapping[str, Mapping[str, str]]) -> SourceChooser:
    return lambda skill, tool: by_skill.get(skill, {}).get(tool, default)


def write_endpoints(
    path: Path,
    action_url: str,
    extra_servers: list[dict[str, str]],
    *,
    crm_oauth: Mapping[str, str] | None = None,
    action_token: str | None = None,
    tracing: Mapping[str, object] | None = None,
) -> Path:
    """The repository's endpoints.yml with ``action_url`` and ``extra_servers`` added to mcp_servers;
    with ``crm_oauth``, the crm server authenticates with that ``oauth:`` block instead of its token;
    with ``action_token``, Rasa sends it to the action server (a header, never in the URL); with
    ``tracing``, a ``tracing:`` block (rasa-sdk 3.21 reads it; Rasa 3.6 ignores it).

    Every value is double-quoted, so Rasa leaves ``${...}`` alone for the bridge to expand.
    """
    document = yaml.safe_load((procs.EXAMPLE_BOT / "endpoints.yml").read_text(encoding="utf-8"))
    document["action_endpoint"] = {"url": action_url}
    if action_token:
        document["action_endpoint"]["headers"] = {"Authorization": f"Bearer {action_token}"}
    if crm_oauth is not None:
        for server in document.get("mcp_servers", []):
            if server["name"] == "crm":
                server.pop("api_key", None)
                server["oauth"] = dict(crm_oauth)
    document["mcp_servers"] = [*document.get("mcp_servers", []), *extra_servers]
    if tracing is not None:
        document["tracing"] = dict(tracing)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, default_style='"', sort_keys=False), encoding="utf-8")
    return path
