"""The ``mcp_servers:`` list of endpoints.yml, in the shape Rasa Pro uses.

```yaml
mcp_servers:
  - name: crm
    url: "${CRM_MCP_URL:-http://127.0.0.1:8200/mcp}"
    type: http
    api_key: "${CRM_MCP_TOKEN}"    # optional, sent as "Authorization: Bearer ..."
```
"""

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from mcp_bridge.envsubst import UnsetVariableError, expand
from mcp_bridge.errors import ConfigError

_TYPES = ("http", "https")
_KNOWN_KEYS = {"name", "url", "type", "api_key", "trusted", "timeout"}


@dataclass(frozen=True)
class MCPServerConfig:
    name: str
    url: str
    type: str = "http"
    # repr=False keeps the secret out of logs and tracebacks that print the config.
    api_key: str | None = field(default=None, repr=False)
    # Only a trusted server's read-only annotations may let a tool skip confirmation.
    trusted: bool = False
    timeout: float = 10.0

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def load_mcp_servers(path: str | Path, env: Mapping[str, str] | None = None) -> dict[str, MCPServerConfig]:
    """Read and check the ``mcp_servers`` list; a file without one configures no servers."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the file: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return parse_mcp_servers(document.get("mcp_servers"), source=str(path), env=env)


def parse_mcp_servers(
    entries: Any, source: str, env: Mapping[str, str] | None = None
) -> dict[str, MCPServerConfig]:
    env = os.environ if env is None else env
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: mcp_servers must be a list of servers")
    servers: dict[str, MCPServerConfig] = {}
    for index, entry in enumerate(entries):
        server = _parse_server(entry, f"{source}: mcp_servers[{index}]", env)
        if server.name in servers:
            raise ConfigError(f"{source}: mcp_servers[{index}]: duplicate server name {server.name!r}")
        servers[server.name] = server
    return servers


def _parse_server(entry: Any, where: str, env: Mapping[str, str]) -> MCPServerConfig:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: each server must be a mapping with name, url and type")
    name = entry.get("name")
    if name is None:
        raise ConfigError(f"{where}: missing field 'name'")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{where}: 'name' must be a non-empty string")
    where = f"{where} ({name})"
    unknown = set(entry) - _KNOWN_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    for required in ("url", "type"):
        if entry.get(required) in (None, ""):
            raise ConfigError(f"{where}: missing field {required!r}")

    def text(key: str) -> str:
        value = entry[key]
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {key!r} must be a string")
        try:
            return expand(value, env)
        except UnsetVariableError as exc:
            raise ConfigError(
                f"{where}: {key!r} uses ${{{exc.name}}}, but the environment variable {exc.name} is not set"
            ) from None

    server_type = text("type")
    if server_type not in _TYPES:
        raise ConfigError(f"{where}: type must be one of {', '.join(_TYPES)}, not {server_type!r}")
    url = text("url")
    parsed = urlparse(url)
    allowed_schemes = ("https",) if server_type == "https" else ("http", "https")
    if parsed.scheme not in allowed_schemes or not parsed.netloc:
        raise ConfigError(f"{where}: url must be an {' or '.join(allowed_schemes)} URL, got {url!r}")
    api_key = text("api_key") if entry.get("api_key") is not None else None
    if api_key is not None and not api_key.strip():
        raise ConfigError(f"{where}: 'api_key' is empty")
    trusted = entry.get("trusted", False)
    if not isinstance(trusted, bool):
        raise ConfigError(f"{where}: 'trusted' must be true or false")
    timeout = entry.get("timeout", 10.0)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout < math.inf:
        raise ConfigError(f"{where}: 'timeout' must be a positive number of seconds")
    return MCPServerConfig(
        name=name, url=url, type=server_type, api_key=api_key, trusted=trusted, timeout=float(timeout)
    )
