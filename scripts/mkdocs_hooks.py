"""mkdocs hooks of the docs site (mkdocs.yml, ``hooks:``).

The plugin's docstrings cross-reference in Sphinx's roles (``:mod:`mcp_bridge.sealing```), which
mkdocstrings renders as Markdown, so the role's name would show before the name it marks. The role is
dropped and the name kept as code (``~``, "show the last part only", dropped with it).
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:mod|class|func|meth|data|attr|exc|obj):(<code>)~?")


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(r"\1", html)
