"""The SDK's "Error parsing SSE message" is dropped only when the session's reader is gone."""

from __future__ import annotations

import logging

import anyio
import pytest

import mcp_bridge.mcp_client.transport  # noqa: F401  (installs the filter on the SDK's logger)

SDK_LOGGER = logging.getLogger("mcp.client.streamable_http")


def log_parse_error(error: Exception) -> None:
    try:
        raise error
    except Exception:
        SDK_LOGGER.exception("Error parsing SSE message")


@pytest.mark.parametrize("error", [anyio.BrokenResourceError(), anyio.ClosedResourceError()])
def test_a_message_after_the_session_closed_is_not_an_error(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="mcp"):
        log_parse_error(error)
    assert [r for r in caplog.records if r.name == SDK_LOGGER.name] == []


def test_any_other_parse_error_is_still_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="mcp"):
        log_parse_error(ValueError("not JSON"))
    (record,) = [r for r in caplog.records if r.name == SDK_LOGGER.name]
    assert record.levelno == logging.ERROR and record.exc_info is not None
