"""What the action server builds from its files and environment (mcp_bridge/action_server/build.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_bridge.action_server import build
from mcp_bridge.confirmation.decisions import ConfirmationPolicy
from mcp_bridge.errors import ConfigError
from mcp_bridge.reading.answers import Yes


@pytest.fixture
def fresh_reader() -> Iterator[None]:
    build.confirmation_reader.cache_clear()
    build.settings.cache_clear()
    yield
    build.confirmation_reader.cache_clear()
    build.settings.cache_clear()


def test_the_bots_reader_is_built_from_the_word_file_and_limit_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_reader: None
) -> None:
    """A bot's form reads with the executor's words and limit, and building it reads no endpoints,
    skills or domain and opens no database (none exist here)."""
    words = tmp_path / "words.yml"
    words.write_text('"yes": ["jawohl"]\n')
    database = tmp_path / "never.sqlite3"
    monkeypatch.chdir(tmp_path)
    for name, value in {
        "CONFIRMATION_WORDS": str(words),
        "MESSAGE_MAX_CHARS": "40",
        "ENDPOINTS": str(tmp_path / "missing-endpoints.yml"),
        "SKILLS_DIR": str(tmp_path / "missing-skills"),
        "DOMAIN": str(tmp_path / "missing-domain.yml"),
        "MCP_BRIDGE_DATABASE": str(database),
    }.items():
        monkeypatch.setenv(name, value)

    reader = build.confirmation_reader()

    assert reader is build.confirmation_reader()  # once per process
    assert isinstance(reader.read("jawohl"), Yes)
    assert reader.max_chars == 40 and reader.too_long("x" * 41) and not reader.too_long("x" * 40)
    policy = ConfirmationPolicy()
    assert (reader.affirm_intent, reader.deny_intent, reader.min_confidence, reader.deny_margin) == (
        policy.affirm_intent,
        policy.deny_intent,
        policy.min_confidence,
        policy.deny_margin,
    )
    assert not database.exists()


def test_the_bots_reader_refuses_a_bad_limit_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, fresh_reader: None
) -> None:
    monkeypatch.setenv("MESSAGE_MAX_CHARS", "many")
    with pytest.raises(ConfigError, match="variable MESSAGE_MAX_CHARS: 'many' is not a whole number"):
        build.confirmation_reader()
