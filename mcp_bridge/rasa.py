"""mcp_bridge for Rasa: one import in a bot's actions package serves the plugin's actions.

```python
# actions/__init__.py
import mcp_bridge.rasa  # noqa: F401
```

rasa_sdk (``python -m rasa_sdk --actions actions``, which ``rasa run actions`` runs) then serves
``action_confirm_tool`` (the confirmation loop), ``action_deny_tool``, ``action_approval_decided`` (a
second approver's decision, :mod:`mcp_bridge.approvals.second_approver`) and one action per skill file
in ``SKILLS_DIR`` (the file's ``action:``), and for servers that act as the person
``action_mcp_resume``, ``action_mcp_account`` and ``action_mcp_disconnect``
(:mod:`mcp_bridge.action_server.person_actions`).
Its start-up checks, the token check on ``/webhook`` and a
loopback default address come through rasa_sdk's plugin hook (:mod:`mcp_bridge.action_server.server`),
which this import registers with rasa_sdk, whether or not the bot has a ``rasa_sdk_plugins`` package.

The import reads the action server's settings (:func:`mcp_bridge.action_server.build.settings`,
``SKILLS_DIR`` among them; a value it cannot use stops it here, saying why) because rasa_sdk leaves no
later moment: it registers the actions it finds right after importing the bot's actions package, and its
plugin hook receives only the web app. So the skill files are read here, once for the process
(:func:`mcp_bridge.action_server.build.skill_files`, the one parser), and only their actions are defined;
everything else (the tools the bot registers after this import, endpoints, domain) is checked when the
server starts, from that same reading.

This module is the only one that does anything on import: the library it serves
(:mod:`mcp_bridge.action_server`) registers nothing and defines no skill's action when imported.
"""

import sys
from typing import Any

from mcp_bridge.action_server import actions, server
from mcp_bridge.action_server.actions import (
    ApprovalDecided,
    ConfirmTool,
    DenyTool,
    ExecutorAction,
    RevokePermissions,
    SkillAction,
    serve_skills,
)
from mcp_bridge.action_server.adapter import apply_decision, turn_from_tracker
from mcp_bridge.action_server.build import build_executor, executor, settings
from mcp_bridge.action_server.person_actions import AccountInUse, DisconnectPerson, ResumeAfterSignIn
from mcp_bridge.contract import CONFIRMATION_LOOP
from mcp_bridge.errors import ConfigError

# A worker process (ACTION_SERVER_SANIC_WORKERS, an auto-reload) gets rasa_sdk's action registry by
# unpickling it, which imports the modules its classes name: they name this one, so a worker imports
# the bot's line too, and its hook (the token check, the start-up checks) runs there as well.
_SERVED = (
    ApprovalDecided,
    ConfirmTool,
    DenyTool,
    RevokePermissions,
    AccountInUse,
    DisconnectPerson,
    ResumeAfterSignIn,
)
for _served in _SERVED:
    _served.__module__ = __name__
actions.SERVED_FROM = __name__  # and each skill's action class, defined by serve_skills below


def __getattr__(name: str) -> Any:
    """A skill's action class, by its class name (a worker unpickling the registry asks here)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(actions, name)


server.install()
try:
    serve_skills(settings().skills_dir)
except ConfigError as exc:  # a setting the action server cannot use: it does not start, saying why
    print(f"action server not started: {exc}", file=sys.stderr, flush=True)
    raise SystemExit(2) from None

__all__ = [
    "CONFIRMATION_LOOP",
    "AccountInUse",
    "ApprovalDecided",
    "ConfirmTool",
    "DenyTool",
    "DisconnectPerson",
    "ExecutorAction",
    "ResumeAfterSignIn",
    "RevokePermissions",
    "SkillAction",
    "apply_decision",
    "build_executor",
    "executor",
    "serve_skills",
    "turn_from_tracker",
]
