"""rasa_sdk's plugin entry point (rasa_sdk imports a package of this name when its server starts).

Installed with mcp_bridge: it registers :mod:`mcp_bridge.rasa.server`, which adds the start-up
checks, the token check and the loopback default to ``python -m rasa_sdk``. A bot with plugins of
its own keeps its own ``rasa_sdk_plugins`` package and registers ``mcp_bridge.rasa.server`` there.
"""

import pluggy


def init_hooks(manager: pluggy.PluginManager) -> None:
    from mcp_bridge.rasa import server

    manager.register(server)
