"""End-to-end conversation tests for Rasa bots that use guarded tools (``mcp-bridge test e2e``).

Reads Rasa Pro's e2e test-case format (:mod:`mcp_bridge.cli.e2e.cases`), runs each case as its own
conversation against a running Rasa server and action server (:mod:`mcp_bridge.cli.e2e.runner`), and
reports in text and JUnit XML (:mod:`mcp_bridge.cli.e2e.report`). Besides what the bot said and which
slots it set, a case can check which tools the action server really called, from its audit trail.
"""
