"""Guarded tool calls for Rasa: local Python tools or MCP tools, confirmed by the person before they write.

A bot uses the plugin through its skill files, one import in its actions package, and the names
below::

    # actions/__init__.py
    import mcp_bridge.rasa  # serves action_confirm_tool, action_deny_tool and one action per skill
    from mcp_bridge import local_tool

    @local_tool
    async def add_timeline_note(contact_id: int, text: str) -> NoteResult: ...

Everything else (the executor, the MCP runtime, the seal, the audit trail) is configured from files
and environment variables and lives in its own module; ``mcp-bridge`` (:mod:`mcp_bridge.cli`) is the
command. The names are imported on first use (PEP 562), not with the package: the Rasa server
imports :mod:`mcp_bridge.channels` from an environment without the plugin's dependencies, and
importing a subpackage runs this file first.

**Local tools** (:mod:`mcp_bridge.tools.local`)

- :func:`local_tool`: register an async function as a tool, under its name or ``name=``; a decorator.
- :func:`register_local_tools`: register several at once, ``{name: async function}``.

**The reader, for a bot's own forms** (:mod:`mcp_bridge.reading.reader`)

- :func:`confirmation_reader`: the reader the action server's executor uses (its word file and
  message limit), so a form's "cancel" and "help" are the confirmation's words.
- :class:`ConfirmationReader`: ``read(text, nlu)`` returns an answer, ``too_long(text)`` a
  ``TooLong`` or None, ``way_out(text)`` ``"cancel"``, ``"help"`` or None. The answers (``Yes``,
  ``No``, ``Grant``, ... and their union ``Answer``) and ``NluOpinion``, the NLU's second opinion, are
  in :mod:`mcp_bridge.reading.answers`.

**Errors** (:mod:`mcp_bridge.errors`)

- :class:`BridgeError`: the base of every error below.
- :class:`ConfigError`: a skill file, ``endpoints.yml``, the domain or an environment variable is
  wrong; the message names the file, the place and the reason.
- :class:`ToolArgumentsError`: arguments a tool refuses (its input schema); nothing was sent.
- :class:`ToolCallError`: a call failed; ``may_have_run`` says whether it may have written.
- :class:`OutcomeUnknownError`: a call that may have run, whose result never came.

``__version__`` is the release, as the installed distribution's metadata names it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The one place the release is named: pyproject.toml reads it (`[tool.setuptools.dynamic]`), so the
# wheel's metadata and `mcp_bridge.__version__` cannot differ. CHANGELOG.md has a section for each.
__version__ = "0.4.0"

if TYPE_CHECKING:
    from mcp_bridge.action_server.build import confirmation_reader
    from mcp_bridge.errors import (
        BridgeError,
        ConfigError,
        OutcomeUnknownError,
        ToolArgumentsError,
        ToolCallError,
    )
    from mcp_bridge.reading.reader import ConfirmationReader
    from mcp_bridge.tools.local import local_tool, register_local_tools

# name -> the module that defines it
_EXPORTS = {
    "local_tool": "tools.local",
    "register_local_tools": "tools.local",
    "confirmation_reader": "action_server.build",
    "ConfirmationReader": "reading.reader",
    "BridgeError": "errors",
    "ConfigError": "errors",
    "OutcomeUnknownError": "errors",
    "ToolArgumentsError": "errors",
    "ToolCallError": "errors",
}

__all__ = [
    "BridgeError",
    "ConfigError",
    "ConfirmationReader",
    "OutcomeUnknownError",
    "ToolArgumentsError",
    "ToolCallError",
    "confirmation_reader",
    "local_tool",
    "register_local_tools",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
