"""The action server's parts, as a library: importing any of them changes nothing in rasa_sdk.

:mod:`~mcp_bridge.action_server.build` builds the executor from files and environment variables (once
per process), :mod:`~mcp_bridge.action_server.adapter` turns a tracker into a turn and a decision into
events, :mod:`~mcp_bridge.action_server.actions` holds the plugin's Rasa actions (and defines one per
skill file when asked, :func:`~mcp_bridge.action_server.actions.serve_skills`),
:mod:`~mcp_bridge.action_server.person_actions` those of a server that acts as the person,
:mod:`~mcp_bridge.action_server.server` what rasa_sdk's plugin hook adds (its
:func:`~mcp_bridge.action_server.server.install` registers it), :mod:`~mcp_bridge.action_server.sign_in`
and :mod:`~mcp_bridge.action_server.approval_tell` the routes it adds,
:mod:`~mcp_bridge.action_server.rasa_api` Rasa's HTTP API as the action server calls it, and
:mod:`~mcp_bridge.action_server.grpc` the checked gRPC server (``mcp-bridge grpc``).

rasa_sdk is imported here and under :mod:`mcp_bridge.rasa` only. Registering the hook and serving the
skills' actions is what the bot's one line, ``import mcp_bridge.rasa``, does; the command-line tools and
the tests import these modules without either happening.
"""
