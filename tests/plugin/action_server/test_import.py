"""Importing the action server's library changes nothing in rasa_sdk; the bot's one line does both.

``import mcp_bridge.rasa`` registers the plugin's hook with rasa_sdk's plugin manager and defines one
action per skill file; every other module of the plugin (the library under
``mcp_bridge/action_server/``, which the command-line tools, the tests and the bot's own code import)
does neither. Asserted as rasa_sdk sees it, in a fresh process: the hook implementations its plugin
manager would call, and the actions its executor registers from every ``Action`` subclass loaded.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_bridge.contract import APPROVAL_ACTION, CONFIRMATION_LOOP, DENY_ACTION, REVOKE_ACTION
from tests.support import procs

REPO = Path(__file__).resolve().parents[3]
SKILLS = REPO / "examples" / "crm_bot" / "skills"
SKILL_ACTIONS = {"action_log_interaction", "action_lookup_contact", "action_show_notes"}

# Runs in a fresh interpreter: imports every module of the plugin but the bot's line (and the channels,
# which run in Rasa's process and import Rasa), reports what rasa_sdk sees, then imports the bot's line
# and reports again.
PROBE = """
import importlib, json, pkgutil, sys

import mcp_bridge
from rasa_sdk.executor import ActionExecutor
from rasa_sdk.plugin import plugin_manager


def seen():
    hooks = plugin_manager().hook.attach_sanic_app_extensions.get_hookimpls()
    executor = ActionExecutor()
    # As `--actions` does: imports the package, then registers every Action subclass loaded anywhere.
    executor.register_package("mcp_bridge.action_server")
    return {
        "hooks": sorted(getattr(h.plugin, "__name__", repr(h.plugin)) for h in hooks),
        "actions": sorted(executor.actions),
    }


imported = []
for found in pkgutil.walk_packages(mcp_bridge.__path__, "mcp_bridge."):
    name = found.name
    if name == "mcp_bridge.rasa" or name.endswith(".__main__") or name.startswith("mcp_bridge.channels."):
        continue
    importlib.import_module(name)
    imported.append(name)
before = seen()
assert "mcp_bridge.rasa" not in sys.modules, "a module of the library imported the bot's line"
import mcp_bridge.rasa
print(json.dumps({"imported": imported, "before": before, "after": seen()}))
"""


def probe() -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        env=procs.child_env({"SKILLS_DIR": str(SKILLS)}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_library_registers_nothing_and_the_bots_line_registers_the_hook_and_the_skills() -> None:
    result = probe()
    imported = set(result["imported"])  # type: ignore[arg-type]
    library = {f"mcp_bridge.action_server.{m}" for m in ("actions", "adapter", "build", "server", "grpc")}
    assert library | {"mcp_bridge.cli", "mcp_bridge.cli.check"} <= imported
    before, after = result["before"], result["after"]
    assert isinstance(before, dict) and isinstance(after, dict)

    assert not [hook for hook in before["hooks"] if hook.startswith("mcp_bridge")]
    assert not SKILL_ACTIONS & set(before["actions"])

    assert "mcp_bridge.action_server.server" in after["hooks"]
    assert SKILL_ACTIONS <= set(after["actions"])
    # The plugin's own actions are served either way (their classes are the library's).
    assert {CONFIRMATION_LOOP, DENY_ACTION, APPROVAL_ACTION, REVOKE_ACTION} <= set(after["actions"])


# A worker process (ACTION_SERVER_SANIC_WORKERS > 1, an auto-reload) gets rasa_sdk's action registry by
# unpickling it: the modules it imports for that must include the bot's line, or the hook (the token
# check, the start-up checks) never runs in the worker.
WORKER_PROBE = """
import json, pickle, re, sys

sys.path.insert(0, sys.argv[1])
from rasa_sdk.executor import ActionExecutor

executor = ActionExecutor()
executor.register_package("actions")
data = pickle.dumps(executor)
print(json.dumps(sorted({m.decode() for m in re.findall(rb"mcp_bridge[.\\w]*", data)})))
"""


@pytest.mark.skipif(
    tuple(int(p) for p in importlib.metadata.version("rasa-sdk").split(".")[:2]) < (3, 21),
    reason="rasa-sdk before 3.21 serves from one process and never pickles its registry",
)
def test_a_worker_unpickling_the_registry_imports_the_bots_line(tmp_path: Path) -> None:
    """A bot whose actions are all the plugin's (Rasa's starter bot after the guide): its registry names
    only ``mcp_bridge.rasa``, never the library beneath it (whose import registers no hook)."""
    (tmp_path / "actions").mkdir()
    (tmp_path / "actions" / "__init__.py").write_text("import mcp_bridge.rasa  # noqa: F401\n")
    env = {**procs.child_env(), "SKILLS_DIR": str(SKILLS), "MCP_BRIDGE_DEVELOPMENT": "1"}
    found = subprocess.run(
        [sys.executable, "-c", WORKER_PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=True,
    )
    assert json.loads(found.stdout.strip().splitlines()[-1]) == ["mcp_bridge.rasa"], found.stderr[-2000:]
