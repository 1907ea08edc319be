"""The variables a response is filled with: slots by name, ``arg_<name>``, ``result_<key>``.

Rasa renders a custom action's responses before it applies the action's slot events, so every
value a response shows is passed explicitly. The prefixes keep names like ``text`` clear of the
keys a bot message itself uses. A list in a result becomes one line per item, formatted by the
step's ``list_format`` (``"- {created_at:.10}: {text}"``) or shown as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def variables(
    slots: Mapping[str, Any],
    arguments: Mapping[str, Any],
    result: Mapping[str, Any] | None = None,
    *,
    tool: str | None = None,
    list_format: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for prefix, source in (("", slots), ("arg_", arguments), ("result_", result or {})):
        for key, value in source.items():
            if isinstance(value, list):
                out[prefix + key] = lines(value, list_format)
            elif isinstance(value, str | int | float | bool):
                out[prefix + key] = value
    if tool is not None:
        out["tool_name"] = tool
        out["tool_arguments"] = json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True)
    return out


def lines(items: list[Any], item_format: str | None) -> str:
    out = []
    for item in items:
        if item_format is not None and isinstance(item, dict):
            try:
                out.append(item_format.format(**{k: "" if v is None else v for k, v in item.items()}))
                continue
            except (KeyError, IndexError, ValueError):
                pass  # an item without the fields the format names is shown as it is
        out.append(f"- {json.dumps(item, ensure_ascii=False) if isinstance(item, dict) else item}")
    return "\n".join(out)
