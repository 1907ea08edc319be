"""A channel's settings from credentials.yml, checked, and what every channel does to a message.

Rasa expands an unquoted ``${VAR}`` in credentials.yml itself (and refuses to start when it is
unset) and leaves a quoted ``"${VAR}"`` alone, as in endpoints.yml. Secrets are written quoted, so
that ``rasa shell`` and other commands that read the file without serving these channels do not need
them, and expanded here, where an unset or weak one stops the server with the channel and key named.
The one variable the channels read of their own is declared in :class:`ChannelEnvironment`, as the
plugin's are in :class:`mcp_bridge.config.settings.Settings` (which the channels may not import), and
listed with them on the environment reference page.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from mcp_bridge.channels.proof import KEY_ENV, ChannelKeys
from mcp_bridge.config.envsubst import UnsetVariableError, expand

# A secret shorter than this is refused: `secrets.token_urlsafe(32)` gives 43 characters.
MIN_SECRET_CHARS = 32
# Conversation ids and user names: Rasa keeps them in trackers, logs and the audit trail.
MAX_ID_CHARS = 128


class ChannelConfigError(ValueError):
    """A channel's settings in credentials.yml cannot be used; the message names channel and key."""


def printable_id(value: Any, limit: int = MAX_ID_CHARS) -> str | None:
    """``value`` if it is a usable id (a string of 1 to ``limit`` printable characters), else None."""
    if isinstance(value, str) and 0 < len(value) <= limit and value.isprintable():
        return value
    return None


@dataclass(frozen=True)
class ChannelEnvironment:
    """What the channels read from the Rasa server's environment besides credentials.yml's ``${VAR}``s:
    one field per variable, its name and meaning in the field's metadata."""

    channel_key: str | None = field(
        default=None,
        metadata={
            "variable": KEY_ENV,
            "meaning": "On the Rasa server, the channels sign with it when credentials.yml gives a "
            "channel no `channel_key`.",
        },
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ChannelEnvironment:
        """The variables ``env`` holds (default: this process's environment, read now); a blank value
        is unset."""
        env = os.environ if env is None else env
        given = {spec.name: env.get(spec.metadata["variable"]) or None for spec in fields(cls)}
        return cls(**given)


class Settings:
    """One channel's entry in credentials.yml; every read names the channel and key when it fails."""

    def __init__(self, credentials: Mapping[str, Any] | None, channel: str, known: set[str]) -> None:
        self.values = dict(credentials or {})
        self.channel = channel
        unknown = sorted(set(self.values) - known)
        if unknown:
            raise self.error(", ".join(unknown), f"unknown setting; known: {', '.join(sorted(known))}")

    def error(self, key: str, reason: str) -> ChannelConfigError:
        return ChannelConfigError(f"credentials.yml, channel {self.channel}, {key}: {reason}")

    def _expanded(self, key: str, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return expand(value, os.environ)
        except UnsetVariableError as exc:
            raise self.error(key, f"the environment variable {exc.name} is not set") from None

    def text(self, key: str, default: str | None = None) -> str:
        value = self._expanded(key, self.values.get(key, default))
        if not isinstance(value, str) or not value:
            raise self.error(key, "a non-empty string is required")
        return value

    def optional_text(self, key: str) -> str | None:
        return self.text(key) if self.values.get(key) is not None else None

    def secret(self, key: str) -> str:
        """A required secret, at least :data:`MIN_SECRET_CHARS` long (never echoed in an error)."""
        if self.values.get(key) is None:
            raise self.error(key, 'required (write it as "${SOME_VARIABLE}" and set that variable)')
        value = self._expanded(key, self.values[key])
        if not isinstance(value, str) or len(value.strip()) < MIN_SECRET_CHARS:
            raise self.error(key, f"shorter than {MIN_SECRET_CHARS} characters: use a random value")
        return value.strip()

    def channel_keys(self, key: str = "channel_key") -> ChannelKeys:
        """The keys this channel signs its proofs with (:mod:`mcp_bridge.channels.proof`): the setting,
        or the environment variable the action servers read too (never echoed in an error)."""
        if self.values.get(key) is None:
            from_environment = ChannelEnvironment.from_env().channel_key
            if from_environment is None:
                raise self.error(key, f"the environment variable {KEY_ENV} is not set")
            value: Any = from_environment
        else:
            value = self._expanded(key, self.values[key])
        if not isinstance(value, str):
            raise self.error(key, "a string is required")
        try:
            return ChannelKeys.parse(value)
        except ValueError as exc:
            raise self.error(key, f"{exc} (the action servers need the same value in {KEY_ENV})") from None

    def integer(self, key: str, default: int, *, minimum: int = 1) -> int:
        value = self._expanded(key, self.values.get(key, default))
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise self.error(key, "a whole number is required") from None
        if number < minimum:
            raise self.error(key, f"at least {minimum} is required")
        return number

    def text_list(self, key: str) -> tuple[str, ...]:
        """A list of strings, or one string of comma- or space-separated items (after expansion)."""
        raw = self.values.get(key)
        items = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else None
        if items is None:
            raise self.error(key, "required: a list of strings, or one string of comma-separated items")
        values: list[str] = []
        for item in items:
            expanded = self._expanded(key, item)
            if not isinstance(expanded, str):
                raise self.error(key, f"{expanded!r} is not a string")
            values += [part for part in expanded.replace(",", " ").split() if part]
        if not values:
            raise self.error(key, "the list is empty")
        return tuple(values)
