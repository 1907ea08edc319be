"""The live end-to-end proof (`make proof`): the whole stack, local and MCP tools, checks that
print what they saw.

Run with `python -m tests.live.proof`. The conversations are in conversations.yml.
"""
