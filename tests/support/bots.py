"""Rasa's own starter bot, and the few lines a bot author adds to adopt mcp_bridge with one skill.

`starter_bot` copies Rasa's `rasa/cli/initial_project/` from .venv-rasa the way `rasa init`'s
scaffold does (`rasa.cli.scaffold.create_initial_project` copies that folder); the adoption test
calls Rasa's function itself. `add_reminder_skill` then does, on an initialised bot, what
docs/ADOPTING.md tells a stranger to do (steps 3 to 6), with the code blocks of the guide itself,
so the guide shows what the adoption test writes: the sample skill renamed (its tool comes from an
MCP server), its responses, the server in endpoints.yml, the one import in actions/__init__.py, and
the intent, slot, examples and rule that start the skill.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from mcp_bridge.cli.init import _entry_blocks, fragment_text
from mcp_bridge.cli.yaml_splice import Splice, compose, entry_name, top_level
from mcp_bridge.contract import RESPONSES
from tests.support.procs import REPO_ROOT, child_env

RASA_SITE = next((REPO_ROOT / ".venv-rasa" / "lib").glob("python3*/site-packages"), None)
STARTER = RASA_SITE / "rasa" / "cli" / "initial_project" if RASA_SITE else None


def starter_bot(dest: Path) -> Path:
    """A copy of Rasa's starter bot (what `rasa init --no-prompt` writes, before it trains)."""
    if STARTER is None or not STARTER.is_dir():
        raise RuntimeError(f"{STARTER}: Rasa's starter bot is missing; run `make setup`")
    shutil.copytree(STARTER, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def mcp_bridge(
    *args: str, cwd: Path, env: Mapping[str, str | None] | None = None, command: Sequence[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the `mcp-bridge` command (this checkout's, unless `command` names another) in `cwd`."""
    return subprocess.run(
        [*(command or [sys.executable, "-m", "mcp_bridge.cli"]), *args],
        cwd=cwd,
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )


GUIDE = REPO_ROOT / "docs" / "ADOPTING.md"
SAMPLE_SKILL = Path("skills") / "save_reminder.yml.example"
# The code blocks of the guide that the adoption test applies, by their first line.
SKILL_BLOCK = "# skills/save_reminder.yml"
RESPONSES_BLOCK = "# domain.yml: add under responses:"
SERVERS_BLOCK = "# endpoints.yml: in place of `mcp_servers: []`"
ACTIONS_BLOCK = "# actions/__init__.py"
INTENT_SLOT_BLOCK = "# domain.yml: add to intents: and to slots:"
DATA_BLOCK = "# data/reminders.yml"


def guide_blocks() -> list[str]:
    """Every fenced code block of docs/ADOPTING.md, as text."""
    return re.findall(r"^```[a-z]*\n(.*?)^```$", GUIDE.read_text(encoding="utf-8"), flags=re.M | re.S)


def guide_block(first_line: str) -> str:
    """The one code block of the guide whose first line starts with ``first_line`` (a comment that
    names the file it goes into); AssertionError if there is not exactly one."""
    found = [block for block in guide_blocks() if block.startswith(first_line)]
    assert len(found) == 1, f"{GUIDE}: {len(found)} code blocks start with {first_line!r}, expected one"
    return found[0]


def _entries(block: str, key: str) -> list[str]:
    """The entries under ``key`` of a guide block, each as its own text (at indent 0), as a person
    would paste them under the bot's key."""
    found = top_level(compose(block, str(GUIDE)), key)
    assert found is not None, f"{GUIDE}: no {key}: in the block starting {block.splitlines()[0]!r}"
    return list(_entry_blocks(block, found[1], entry_name).values())


def add_reminder_skill(bot: Path) -> Path:
    """Steps 3 to 6 of docs/ADOPTING.md on a bot after `mcp-bridge init`, with the guide's own blocks:
    the sample skill renamed, its responses, the MCP server, the one import, the intent, the slot,
    and data/reminders.yml."""
    assert (bot / SAMPLE_SKILL).exists(), f"{bot}: mcp-bridge init wrote no {SAMPLE_SKILL}"
    (bot / SAMPLE_SKILL).rename(bot / "skills" / "save_reminder.yml")
    domain = bot / "domain.yml"
    splice = Splice(domain.read_text(), str(domain))
    splice.add_map_entries("responses", _entries(guide_block(RESPONSES_BLOCK), "responses"), spaced=True)
    splice.add_list_items("intents", _entries(guide_block(INTENT_SLOT_BLOCK), "intents"))
    splice.add_map_entries("slots", _entries(guide_block(INTENT_SLOT_BLOCK), "slots"))
    domain.write_text(splice.result())
    endpoints = bot / "endpoints.yml"
    servers = guide_block(SERVERS_BLOCK).split("\n", 1)[1]
    assert "mcp_servers: []\n" in endpoints.read_text(), "mcp-bridge init wrote no empty mcp_servers"
    endpoints.write_text(endpoints.read_text().replace("mcp_servers: []\n", servers))
    (bot / "actions" / "__init__.py").write_text(guide_block(ACTIONS_BLOCK))
    (bot / "data" / "reminders.yml").write_text(guide_block(DATA_BLOCK))
    return bot


_UNUSED = re.compile(r"UserWarning: The utterance '(\w+)' is not used in any story or rule\.")
# What else Rasa says about a bot's files: its warnings (UserWarning), a data file without its
# version line (logged three times at INFO level), and log lines at WARNING or ERROR level.
_COMPLAINT = re.compile(
    r"UserWarning|The 'version' key is missing in the training data file|^\S+ \S+ (WARNING|ERROR) "
)


def expected_unused_responses() -> set[str]:
    """The responses `rasa data validate` and `rasa train` call "not used in any story or rule" on
    the starter bot after the guide (step 8): the plugin's (from init) and the skill's, which the
    plugin's actions say themselves."""
    plugin = set(yaml.safe_load(fragment_text("domain.yml"))["responses"]) - RESPONSES.for_approvals()
    plugin -= RESPONSES.for_remembering()
    skill = yaml.safe_load(guide_block(RESPONSES_BLOCK))["responses"]
    return set(plugin) | set(skill)


def rasa_warnings(output: str) -> tuple[set[str], list[str]]:
    """From Rasa's output: the responses it calls unused, and every other complaint about the bot."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in output.splitlines()]
    unused = set(_UNUSED.findall(output))
    other = [line for line in lines if _COMPLAINT.search(line) and not _UNUSED.search(line)]
    return unused, other
