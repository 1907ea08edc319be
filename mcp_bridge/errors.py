"""Typed failures. Callers decide what to tell the person from the type, never from a message."""


class BridgeError(Exception):
    """Base class for everything this package raises on purpose."""


class ConfigError(BridgeError):
    """A configuration file is invalid. The message names the file, the place and the reason."""


class ToolNotFoundError(BridgeError):
    """A tool name resolves to nothing the skill may call. Nothing was sent anywhere."""


class ToolArgumentsError(BridgeError):
    """The arguments do not satisfy the tool's input schema. Nothing was sent."""


class ToolCallError(BridgeError):
    """A call did not produce a result.

    ``may_have_run`` tells whether the request might have reached the tool: callers must never
    repeat such a call blindly, and must not tell the person that nothing happened without saying
    that it is uncertain.
    """

    may_have_run: bool = False


class ServerUnavailableError(ToolCallError):
    """The MCP server could not be reached. The request was never delivered."""


class NotAuthorisedError(ServerUnavailableError):
    """The MCP server refused the bridge's credentials (HTTP 401/403, or no token could be had).

    Its authentication answers before any tool runs, so nothing was written."""


class ToolTimeoutError(ToolCallError):
    """No answer within the timeout. The tool may still have run."""

    may_have_run = True


class OutcomeUnknownError(ToolCallError):
    """The connection broke after the request was sent. The tool may have run."""

    may_have_run = True


class ToolResultInvalidError(OutcomeUnknownError):
    """The tool ran, but its result breaks the output schema it publishes (or is missing).

    The call reached the tool, so a write may have happened; the result is not used, since the
    steps would branch on keys the tool did not promise. The message names the tool and the part
    of the result that failed, never its value."""


class InputRequiredError(ToolCallError):
    """A server stopped the call to ask the person something (elicitation).

    Under that revision a call that asks for input completes only when it is sent again with the
    answers (``input_responses``) and the server's opaque ``request_state``, so the tool has not
    done its work: nothing ran to completion. ``requests`` are the server's questions by key (each
    the ``elicitation/create`` params as the wire has them);
    :mod:`mcp_bridge.server_questions.elicitation` asks them.

    A 2025-11-25 server asks inside the running call instead: the call is kept open in this process
    (:mod:`mcp_bridge.server_questions.waiting_calls`) and ``handle`` names it; the answers go to that
    call, and only this process can give them.
    """

    def __init__(
        self,
        message: str,
        *,
        requests: dict[str, dict[str, object]],
        request_state: str | None,
        handle: str | None = None,
    ) -> None:
        super().__init__(message)
        self.requests = requests
        self.request_state = request_state
        self.handle = handle


class QuestionLapsedError(OutcomeUnknownError):
    """A 2025-11-25 server's question was answered too late: the call that asked is no longer waiting
    here (the wait ran out, the process restarted, or another process got the answer). The server
    was told ``cancel`` and its tool decided what to do without the answer, so it may have written."""
