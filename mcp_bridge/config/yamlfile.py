"""Reading the plugin's YAML files: every failure is a :class:`ConfigError` naming the file and place.

Rules:

* a file that is missing, unreadable or not UTF-8 is refused with the file and the reason;
* a file that is not YAML is refused with the file, the line and column of the problem (counted
  from 1, as an editor counts them) and the parser's reason, on one line;
* a document that does not fit its schema is refused with the file, the place in the document
  (``steps[1].arguments.text``) and pydantic's reason for the first problem only: the rest is noise
  to the person who fixes the file.

Every loader of the plugin (endpoints.yml, skill files, the domain, word files) goes through here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mcp_bridge.errors import ConfigError

__all__ = ["YAMLFileError", "load_yaml", "parse_yaml", "place", "schema_error"]


class YAMLFileError(ConfigError):
    """A file could not be read as YAML. ``reason`` is the message without the file name, for a
    caller that says which kind of file it was (``domain.yml: cannot read the domain: ...``)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def load_yaml(path: str | Path) -> Any:
    """The document in ``path`` (None for an empty file), read with YAML's safe loader."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise YAMLFileError(path, "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise YAMLFileError(path, f"cannot read the file: {exc}") from None
    return parse_yaml(text, path)


def parse_yaml(text: str, path: str | Path, *, where: str = "", first_line: int = 1) -> Any:
    """The document in ``text``, a part of the file ``path`` (``where`` in it) that starts at line
    ``first_line`` of the file, read with YAML's safe loader; the lines of a syntax error are the file's."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        place = f"{where}: " if where else ""
        raise YAMLFileError(Path(path), f"{place}not valid YAML: {_syntax(exc, first_line - 1)}") from None


def _syntax(exc: yaml.YAMLError, offset: int = 0) -> str:
    """``line 2, column 6: expected ',' or ']', but got ':' (while parsing a flow sequence that
    starts at line 1, column 8)``; PyYAML's own text spans several lines and names no file."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return " ".join(str(exc).split())
    mark = exc.problem_mark
    text = f"line {mark.line + 1 + offset}, column {mark.column + 1}: {exc.problem}"
    if exc.context:
        started = exc.context_mark
        at = ""
        if started:
            at = f" that starts at line {started.line + 1 + offset}, column {started.column + 1}"
        text += f" ({exc.context}{at})"
    return text


def schema_error(path: str | Path, exc: ValidationError, *, skip: Collection[str] = ()) -> ConfigError:
    """``file: place: reason`` for the first problem pydantic found in the file's document.

    ``skip`` names location parts that mean nothing to the file's author (pydantic's names for the
    members of a union, such as ``SlotArgument``)."""
    first = exc.errors()[0]
    return ConfigError(f"{path}: {place(first['loc'], skip=skip)}: {first['msg']}")


def place(loc: Iterable[Any], *, skip: Collection[str] = ()) -> str:
    """A pydantic location as a person reads it: ``steps[1].arguments.text``, or ``top level``."""
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif part in skip:
            continue
        else:
            parts.append(f".{part}" if parts else str(part))
    return "".join(parts) or "top level"
