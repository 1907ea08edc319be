"""Rasa's own starter bot, and the few lines a bot author adds to adopt mcp_bridge with one skill.

`starter_bot` copies Rasa's `rasa/cli/initial_project/` from .venv-rasa the way `rasa init`'s
scaffold does (`rasa.cli.scaffold.create_initial_project` copies that folder); the adoption test
calls Rasa's function itself. `add_reminder_skill` then does, on an initialised bot, what
docs/ADOPTING.md tells a stranger to do: a skill file whose tool comes from an MCP server, the
server in endpoints.yml, the one import in actions/__init__.py, and the intent, slot, examples and
rule that start the skill.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from mcp_bridge.yaml_splice import Splice
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


SKILL = """\
skill: save_reminder
action: action_save_reminder
description: Save a reminder in the reminders service, after the person confirms.
tools:
  create_reminder: mcp:reminders
tool_constraints:
  - create_reminder:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm_reminder
        utter_on_user_denial: utter_reminder_cancelled
steps:
  - execute_tool: create_reminder
    arguments:
      text: {slot: reminder_text}
    on_success: utter_reminder_saved
    on_error: utter_tool_failed
reset_slots: [reminder_text]
"""

SERVERS = """\
mcp_servers:
  - name: reminders
    url: "${REMINDERS_MCP_URL}"
    type: http
"""

RESPONSES = {
    "utter_confirm_reminder": """\
utter_confirm_reminder:
  - text: "Save the reminder \\"{arg_text}\\"?"
    buttons:
      - title: "No"
        payload: /deny
      - title: "Yes"
        payload: /affirm
""",
    "utter_reminder_cancelled": 'utter_reminder_cancelled:\n  - text: "OK, no reminder saved."\n',
    "utter_reminder_saved": 'utter_reminder_saved:\n  - text: "Reminder saved."\n',
}

NLU = """\
version: "3.1"
nlu:
  - intent: save_reminder
    examples: |
      - remind me to water the plants
      - remind me to call mum tomorrow
      - remind me to buy milk
      - set a reminder to pay the rent
      - please remind me to renew my passport
      - remind me about the dentist on monday
      - add a reminder: book the train tickets
      - reminder to send the invoice
"""

RULES = """\
version: "3.1"
rules:
  - rule: Save a reminder (the skill asks before it writes)
    steps:
      - intent: save_reminder
      - action: action_save_reminder
"""

ACTIONS = '''\
"""The bot's actions: mcp_bridge's (the confirmation loop and one action per skill file)."""

import mcp_bridge.rasa  # noqa: F401
'''


def add_reminder_skill(bot: Path) -> Path:
    """Adopt the reminder skill in an initialised bot (after `mcp-bridge init`)."""
    (bot / "skills").mkdir(exist_ok=True)
    (bot / "skills" / "save_reminder.yml").write_text(SKILL)
    endpoints = bot / "endpoints.yml"
    endpoints.write_text(endpoints.read_text().replace("mcp_servers: []\n", SERVERS))
    (bot / "actions" / "__init__.py").write_text(ACTIONS)
    domain = bot / "domain.yml"
    splice = Splice(domain.read_text(), str(domain))
    splice.add_list_items("intents", ["- save_reminder\n"])
    splice.add_map_entries(
        "slots",
        [
            "reminder_text:\n  type: text\n  influence_conversation: false\n  mappings:\n"
            "    - type: from_text\n      intent: save_reminder\n"
        ],
    )
    splice.add_map_entries("responses", list(RESPONSES.values()), spaced=True)
    domain.write_text(splice.result())
    (bot / "data" / "reminders.yml").write_text(NLU + "\n" + RULES.replace('version: "3.1"\n', ""))
    return bot
