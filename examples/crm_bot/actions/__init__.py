"""The CRM bot's actions: the plugin's (one import) and the bot's own local tools and form.

``python -m rasa_sdk --actions actions`` imports this package: ``mcp_bridge.rasa`` then serves
action_confirm_tool, action_deny_tool and one action per skill file; the CRM tool functions are
registered as the local tools a skill's ``local`` tool-source line finds by name.
"""

from crm.tools import TOOLS

import mcp_bridge.rasa  # noqa: F401
from mcp_bridge import register_local_tools

register_local_tools(TOOLS)
