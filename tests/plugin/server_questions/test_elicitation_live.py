"""A server's questions answered over turns, against real servers: the runtime gets the question
(a 2026-07-28 input-required result, or a 2025-11-25 question inside the call, whose call is held
open meanwhile), the state machine asks it and reads the person's replies, and the call goes on with
the answers (and the server's opaque request_state, or the held call's handle). On 2025-11-25
servers (ours and npm's server-everything, nobody's here) the same call completes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import httpx2
import pytest

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.errors import InputRequiredError, QuestionLapsedError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.server_questions.elicitation import Replied, begin, reply
from mcp_bridge.tools.results import ToolResult
from tests.support import procs


@pytest.fixture(scope="module", params=["modern", "legacy"])
def era_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, procs.ServiceProcess]]:
    with procs.era_mcp(request.param) as server:
        yield request.param, server


@pytest.fixture
async def runtime(era_server: tuple[str, procs.ServiceProcess]) -> AsyncIterator[MCPRuntime]:
    made = MCPRuntime({"items": MCPServerConfig(name="items", url=era_server[1].url)}, connect_timeout=5.0)
    try:
        yield made
    finally:
        await made.aclose()


def writes(server: procs.ServiceProcess) -> list[str]:
    texts: list[str] = httpx2.get(procs.base_url(server.url) + "/writes", timeout=5.0).json()["texts"]
    return texts


async def call_and_answer(
    runtime: MCPRuntime, tool: str, arguments: dict[str, Any], replies: Sequence[str]
) -> tuple[ToolResult, list[Replied]]:
    """Call; ask each question the server sends with the state machine, one reply per turn; send the
    answers back with the server's request_state. Every question must be answered by ``replies``."""
    answered: list[Replied] = []
    state: dict[str, Any] = {}
    for _ in range(3):
        try:
            return await runtime.invoke("items", tool, arguments, **state), answered
        except InputRequiredError as asked:
            responses: dict[str, dict[str, Any]] = {}
            for key, request in asked.requests.items():
                step = begin("items", request)
                for text in replies:
                    if isinstance(step, Replied):
                        break
                    step = reply(step.pending, text)  # the next turn: read back from the tracker
                assert isinstance(step, Replied), f"{tool}: not answered by {replies}"
                answered.append(step)
                responses[key] = {
                    "action": step.action,
                    **({"content": step.content} if step.content else {}),
                }
            state = {
                "input_responses": responses,
                "request_state": asked.request_state,
                "handle": asked.handle,
            }
    raise AssertionError("the server kept asking")


VISIT_REPLIES = ("2026-12-03", "3", "yes", "bring the contract")


async def test_a_form_answered_over_turns_completes_the_call(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime
) -> None:
    era, server = era_server
    before = writes(server)
    result, answered = await call_and_answer(runtime, "book_visit", {"contact": "dana"}, VISIT_REPLIES)
    assert answered == [
        Replied(
            "accept", {"day": "2026-12-03", "attendees": 3, "parking": True, "note": "bring the contract"}
        )
    ]
    assert result.ok, result
    assert writes(server)[len(before) :] == ["visit dana 2026-12-03 x3 parking=True bring the contract"]
    assert len(runtime.waiting) == 0  # a 2025-11-25 call was held while asking, and no longer


@pytest.mark.parametrize(
    ("replies", "action"), [(("decline",), "decline"), (("2026-12-03", "cancel"), "cancel")]
)
async def test_a_declined_or_cancelled_form_writes_nothing(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime, replies: tuple[str, ...], action: str
) -> None:
    _, server = era_server
    before = writes(server)
    result, answered = await call_and_answer(runtime, "book_visit", {"contact": "dana"}, replies)
    assert answered == [Replied(action)]
    assert result.ok is False and result.error == f"no visit booked: the person chose {action}"
    assert writes(server) == before


@pytest.mark.parametrize(
    ("replies", "action"), [(("yes",), "accept"), (("no",), "decline"), (("hm?", "cancel"), "cancel")]
)
async def test_a_url_needs_the_persons_consent(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime, replies: tuple[str, ...], action: str
) -> None:
    _, server = era_server
    before = writes(server)
    result, answered = await call_and_answer(runtime, "connect_account", {}, replies)
    assert answered == [Replied(action)]
    assert result.ok is (action == "accept"), result
    assert writes(server)[len(before) :] == (["connected"] if action == "accept" else [])


async def test_a_question_asking_for_a_card_number_is_declined_unasked_and_nothing_is_paid(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    era, server = era_server
    before = writes(server)
    # No reply is ever needed: the question is not asked.
    result, answered = await call_and_answer(runtime, "pay_invoice", {"invoice": "4471"}, ())
    assert result.ok is False and result.error == "not paid: the person chose decline"
    assert writes(server) == before
    reason = "the field 'card_number' asks for a card number (its name says 'card number')"
    if era == "modern":  # the question comes back to the caller, which declines it unasked
        assert answered == [Replied("decline", reason=reason)]
    else:  # asked mid-call: the runtime's callback declines it without holding the call
        assert answered == [] and len(runtime.waiting) == 0
    assert reason in caplog.text


@pytest.fixture(scope="module")
def everything() -> Iterator[str]:
    with procs.everything_mcp() as server:
        yield server.url


async def test_server_everythings_questions_are_answered_by_the_person_on_its_2025_11_25_session(
    everything: str,
) -> None:
    runtime = MCPRuntime(
        {"everything": MCPServerConfig(name="everything", url=everything)}, connect_timeout=10.0
    )
    try:
        tools = await runtime.tools("everything")
        # It offers its elicitation tools only to a client that declares elicitation: the bridge does.
        assert {"trigger-elicitation-request", "trigger-url-elicitation"} <= set(tools)
        with pytest.raises(InputRequiredError) as form:
            await runtime.invoke("everything", "trigger-elicitation-request", {})
        assert form.value.handle and form.value.request_state is None
        [question] = form.value.requests.values()
        assert question["requestedSchema"]["required"] == ["name"]
        declined = await runtime.invoke(
            "everything",
            "trigger-elicitation-request",
            {},
            input_responses={"elicitation": {"action": "decline"}},
            handle=form.value.handle,
        )
        assert "User declined to provide the requested information" in declined.data["text"]
        arguments = {"url": "https://example.com/connect"}
        with pytest.raises(InputRequiredError) as url:
            await runtime.invoke("everything", "trigger-url-elicitation", arguments)
        [consent] = url.value.requests.values()
        assert consent["mode"] == "url" and consent["url"] == "https://example.com/connect"
        accepted = await runtime.invoke(
            "everything",
            "trigger-url-elicitation",
            arguments,
            input_responses={"elicitation": {"action": "accept"}},
            handle=url.value.handle,
        )
        assert "User completed the URL elicitation flow" in accepted.data["text"]
        assert len(runtime.waiting) == 0
    finally:
        await runtime.aclose()


async def test_an_answer_for_a_call_not_held_here_is_a_lapsed_question(
    era_server: tuple[str, procs.ServiceProcess], runtime: MCPRuntime
) -> None:
    _, server = era_server
    before = writes(server)
    with pytest.raises(QuestionLapsedError, match="stopped waiting for the person's answer") as lapsed:
        await runtime.invoke(
            "items",
            "book_visit",
            {"contact": "dana"},
            input_responses={"elicitation": {"action": "accept", "content": {"day": "2026-12-03"}}},
            handle="a-call-held-by-another-process",
        )
    assert lapsed.value.may_have_run  # the server heard cancel there, and its tool decided
    assert writes(server) == before
