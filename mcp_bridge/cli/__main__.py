"""`python -m mcp_bridge.cli`: the same as the `mcp-bridge` command."""

import sys

from mcp_bridge.cli import main

sys.exit(main())
