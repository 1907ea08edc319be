"""The action server's own record of what authorises a write, and the one database it lives in.

Nothing a tracker says authorises a write: which question is open, whether it was answered, which
signed messages were used and which permissions stand are kept here, by the action server, and every
change is one atomic transition (:mod:`mcp_bridge.record.store`). The same database holds the calls
waiting for a second approver (:mod:`mcp_bridge.approvals.store`) and the people's tokens
(:mod:`mcp_bridge.auth.token_store`): SQLite in a file by default, PostgreSQL for replicas
(:mod:`mcp_bridge.record.database`), one schema with versioned migrations (:mod:`mcp_bridge.record.schema`).
"""
