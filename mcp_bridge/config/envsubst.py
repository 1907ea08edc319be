"""``${VAR}`` and ``${VAR:-default}`` in configuration values, read from the environment.

Rasa expands unquoted ``${VAR}`` in endpoints.yml itself and leaves quoted values alone, so the
bridge's keys are written quoted and expanded here, where an unset variable can be reported with
the file and the server it belongs to.
"""

import re
from collections.abc import Mapping

_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class UnsetVariableError(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def expand(value: str, env: Mapping[str, str]) -> str:
    """Replace every ``${VAR}`` in ``value``; raise :class:`UnsetVariableError` for an unset one."""

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = env.get(name)
        # As in the shell, ${VAR:-default} also covers a variable that is set but empty.
        if default is not None and not value:
            return default
        if value is not None:
            return value
        raise UnsetVariableError(name)

    return _PATTERN.sub(replace, value)


def required_variables(value: str) -> list[str]:
    """The variables ``value`` cannot do without: each ``${VAR}`` without a ``:-default``, in order."""
    names: list[str] = []
    for match in _PATTERN.finditer(value):
        if match.group(2) is None and match.group(1) not in names:
            names.append(match.group(1))
    return names


def unset_variables(value: str, env: Mapping[str, str]) -> list[str]:
    """The variables of ``value`` that :func:`expand` would find unset, in order."""
    return [name for name in required_variables(value) if env.get(name) is None]
