"""Test-case files in Rasa Pro's end-to-end format, plus steps about tool calls and second approvers.

A file holds ``test_cases`` and, optionally, ``fixtures`` (slot values set before a case starts)
and ``metadata`` (message metadata sent with user messages), as Rasa Pro defines them::

    fixtures:
      - dana_known:            # a fixture: slot name -> value
          contact_email: dana@example.com
    metadata:
      - web:                   # a metadata entry: key -> value
          channel: web
    test_cases:
      - test_case: user confirms the note
        fixtures: [dana_known]  # applied in order before the first message
        metadata: web           # sent with every user message of the case
        steps:
          - user: "log a call with dana@example.com"
            metadata: web       # merged over the case's metadata for this message only
          - utter: utter_ask_note_text
          - bot: "What should the note say?"
          - slot_was_set:
              - contact_email: dana@example.com
              - contact_name
          - slot_was_not_set: [note_text]
          - tool_called: {tool: find_contact_by_email, arguments: {email: dana@example.com}}
          - no_tool_called: add_timeline_note
      - test_case: a supervisor approves the refund note
        steps:
          - user: "log a call with dana@example.com: she wants a refund"
          - utter: utter_confirm_note
          - user: "yes"
          - utter: utter_awaiting_approval
          - approval: {by: sam, decides: approve}   # sam logs in to the approval page and approves
          - utter: utter_note_saved                 # what the conversation was told
          - tool_called: {tool: add_timeline_note, times: 1}

Rules of the checks (every step after a ``user`` step checks what happened in answer to it):

* ``utter`` (response name) and ``bot`` (exact text) describe the bot's messages of that turn, in
  order, and every message must be described: an extra or a missing message fails. An ``utter``
  and a ``bot`` step next to each other may describe the same message.
* ``slot_was_set`` / ``slot_was_not_set``: a slot event of that turn (with that value, if given).
* ``tool_called`` / ``no_tool_called``: a tool call the action server made in that turn, read from
  its audit trail. ``arguments`` lists the arguments to check; others are not checked. With
  ``times: n``, exactly n calls of the tool with those arguments were made in that turn (``times:
  1`` with only the tool named: the tool was called once, whatever its arguments).

Two more steps act, as ``user`` does, and the checks after them are about what the conversation was
told in answer (:mod:`mcp_bridge.cli.e2e.approvals` drives the approval page):

* ``approval: {by: NAME, decides: approve | refuse, page_answers: ANSWER}``: the approver NAME logs in
  to the approval page and decides the conversation's latest held call (its id read from the audit
  trail's ``approval_requested`` entry). ``page_answers`` (default ``decided``) is what the page must
  answer: ``decided`` (then the request must be on NAME's list, and the runner waits for the
  conversation to be told), ``own_request`` (NAME asked for the call: not on their list, refused),
  ``not_allowed`` (NAME lacks the role), ``unknown_person`` (the approvers file's ``people:`` does not
  name NAME or the requester), ``already_decided`` (decided before, or expired).
* ``approval_expires: {within: SECONDS}``: nobody decides; waits at most that long for the
  conversation to be told the held call's outcome (its expiry, when the skill's ``expires_after`` is
  shorter than ``within``).

Loading errors name the file, the test case, the step and the line (:class:`CaseFileError`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mcp_bridge.errors import ConfigError

StepKind = Literal[
    "user",
    "approval",
    "approval_expires",
    "utter",
    "bot",
    "slot_was_set",
    "slot_was_not_set",
    "tool_called",
    "no_tool_called",
]
STEP_KINDS: tuple[str, ...] = get_args(StepKind)
_LINE = "__line__"
_NAMED = ("utter", "tool_called", "no_tool_called")
# Steps that make something happen in the conversation; the checks after one are about its answer.
ACTION_STEPS = ("user", "approval", "approval_expires")
PageAnswer = Literal["decided", "own_request", "not_allowed", "unknown_person", "already_decided"]
PAGE_ANSWERS: tuple[str, ...] = ("decided", "own_request", "not_allowed", "unknown_person", "already_decided")
# The longest an approval_expires step may wait (the runner polls; a case is not a soak test).
MAX_WITHIN_SECONDS = 600.0


class CaseFileError(ConfigError):
    """A test-case file is invalid; the message names the file, the case, the step and the reason."""


# -- what a loaded case is ---------------------------------------------------------------------


@dataclass(frozen=True)
class SlotExpectation:
    name: str
    value: Any = None
    has_value: bool = False

    def __str__(self) -> str:
        return f"{self.name}: {_show(self.value)}" if self.has_value else self.name


@dataclass(frozen=True)
class Step:
    """One step of a case. ``number`` counts from 1 within the case; ``text`` is how the report shows it."""

    kind: StepKind
    number: int
    line: int
    text: str
    # user: the message; utter: the response name; bot: the text; tool steps: the tool name
    value: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)  # user steps: the merged metadata
    slots: tuple[SlotExpectation, ...] = ()
    arguments: Mapping[str, Any] = field(default_factory=dict)
    # tool_called: exactly this many matching calls in the turn (None: at least one)
    times: int | None = None
    # approval: approve (True) or refuse (False), and what the approval page must answer
    approve: bool = True
    page_answers: PageAnswer = "decided"
    # approval_expires: at most this many seconds until the conversation is told
    within: float = 0.0


@dataclass(frozen=True)
class TestCase:
    name: str
    file: Path
    line: int
    steps: tuple[Step, ...]
    # slot name -> value, from the case's fixtures in order
    fixtures: Mapping[str, Any] = field(default_factory=dict)

    __test__ = False  # not a pytest class

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


# -- the file format, validated with pydantic ----------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class _ToolCall(_Model):
    tool: str
    arguments: dict[str, Any] = {}
    times: int | None = Field(default=None, ge=0)

    @field_validator("tool")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the tool name is empty")
        return value


class _UserStep(_Model):
    user: str
    metadata: str | None = None


class _UtterStep(_Model):
    utter: str


class _BotStep(_Model):
    bot: str


class _SlotWasSet(_Model):
    slot_was_set: list[str | dict[str, Any]]


class _SlotWasNotSet(_Model):
    slot_was_not_set: list[str | dict[str, Any]]


class _ToolCalled(_Model):
    tool_called: _ToolCall  # "tool_called: name" is read as {tool: name}


class _NoToolCalled(_Model):
    no_tool_called: str


class _Decision(_Model):
    by: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    decides: Literal["approve", "refuse"]
    page_answers: PageAnswer = "decided"


class _Approval(_Model):
    approval: _Decision


class _Wait(_Model):
    within: float = Field(gt=0, le=MAX_WITHIN_SECONDS)


class _ApprovalExpires(_Model):
    approval_expires: _Wait


_STEP_MODELS: dict[str, type[_Model]] = {
    "user": _UserStep,
    "utter": _UtterStep,
    "bot": _BotStep,
    "slot_was_set": _SlotWasSet,
    "slot_was_not_set": _SlotWasNotSet,
    "tool_called": _ToolCalled,
    "no_tool_called": _NoToolCalled,
    "approval": _Approval,
    "approval_expires": _ApprovalExpires,
}


class _Case(_Model):
    test_case: str
    steps: list[dict[str, Any]]
    fixtures: list[str] = []
    metadata: str | None = None


class _File(_Model):
    test_cases: list[dict[str, Any]]
    fixtures: list[dict[str, dict[str, Any]]] = []
    metadata: list[dict[str, dict[str, Any]]] = []
    # Rasa Pro keys that have no meaning here are refused by name rather than ignored.


# -- loading -------------------------------------------------------------------------------------


def load_paths(paths: Iterable[str | Path]) -> list[TestCase]:
    """Every case in the given files, and in the ``*.yml`` / ``*.yaml`` files under given folders."""
    cases: list[TestCase] = []
    for path in _files(paths):
        cases.extend(load_file(path))
    return cases


def _files(paths: Iterable[str | Path]) -> list[Path]:
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise CaseFileError(f"{path}: no such file or folder")
    if not found:
        raise CaseFileError(f"no test-case files in {', '.join(str(p) for p in paths)}")
    return found


def load_file(path: Path) -> list[TestCase]:
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_LineLoader)  # noqa: S506
    except yaml.YAMLError as exc:
        raise CaseFileError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(document, dict):
        raise CaseFileError(f"{path}: expected a mapping with the key test_cases")
    body = _strip(document)
    try:
        parsed = _File.model_validate(body)
    except ValidationError as exc:
        raise CaseFileError(f"{path}: {_reasons(exc)}") from None
    fixtures = _named_entries(path, "fixtures", parsed.fixtures)
    metadata = _named_entries(path, "metadata", parsed.metadata)
    cases: list[TestCase] = []
    names: set[str] = set()
    for index, raw_case in enumerate(document["test_cases"], start=1):
        case = _load_case(path, index, raw_case, fixtures, metadata)
        if case.name in names:
            raise CaseFileError(f"{path}, test case {case.name!r} (line {case.line}): the name is used twice")
        names.add(case.name)
        cases.append(case)
    return cases


def _named_entries(
    path: Path, key: str, entries: list[dict[str, dict[str, Any]]]
) -> dict[str, dict[str, Any]]:
    named: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if len(entry) != 1:
            raise CaseFileError(
                f"{path}: each entry of {key} is one name with its values, got {sorted(entry)}"
            )
        ((name, values),) = entry.items()
        named[name] = dict(values)
    return named


def _load_case(
    path: Path,
    index: int,
    raw: Any,
    fixtures: Mapping[str, Mapping[str, Any]],
    metadata: Mapping[str, Mapping[str, Any]],
) -> TestCase:
    if not isinstance(raw, dict):
        raise CaseFileError(f"{path}, test case {index}: expected a mapping with test_case and steps")
    line = int(raw.get(_LINE, 0))
    label = f"test case {raw.get('test_case')!r}" if raw.get("test_case") else f"test case {index}"
    where = f"{path}, {label} (line {line})"
    try:
        case = _Case.model_validate(_strip(raw))
    except ValidationError as exc:
        raise CaseFileError(f"{where}: {_reasons(exc)}") from None
    slots: dict[str, Any] = {}
    for name in case.fixtures:
        if name not in fixtures:
            raise CaseFileError(
                f"{where}: unknown fixture {name!r} (defined: {', '.join(fixtures) or 'none'})"
            )
        slots.update(fixtures[name])
    case_metadata = _metadata(where, case.metadata, metadata)
    steps: list[Step] = []
    for number, raw_step in enumerate(raw["steps"], start=1):
        steps.append(_load_step(where, number, raw_step, case_metadata, metadata))
    if not steps or steps[0].kind != "user":
        first = steps[0].text if steps else "no steps"
        raise CaseFileError(f"{where}, step 1: a case starts with a user step, not {first}")
    return TestCase(case.test_case, path, line, tuple(steps), slots)


def _metadata(where: str, name: str | None, metadata: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    if name is None:
        return {}
    if name not in metadata:
        raise CaseFileError(f"{where}: unknown metadata {name!r} (defined: {', '.join(metadata) or 'none'})")
    return dict(metadata[name])


def _load_step(
    where: str,
    number: int,
    raw: Any,
    case_metadata: Mapping[str, Any],
    metadata: Mapping[str, Mapping[str, Any]],
) -> Step:
    if not isinstance(raw, dict):
        raise CaseFileError(f"{where}, step {number}: expected a mapping such as 'user: ...', got {raw!r}")
    line = int(raw.get(_LINE, 0))
    body = _strip(raw)
    here = f"{where}, step {number} (line {line})"
    kinds = [key for key in body if key in _STEP_MODELS]
    if len(kinds) != 1:
        unknown = [key for key in body if key not in _STEP_MODELS and key != "metadata"]
        if unknown:
            reason = f"unknown step {unknown[0]!r}; a step is one of {', '.join(STEP_KINDS)}"
        else:
            reason = f"a step is exactly one of {', '.join(STEP_KINDS)}, got {', '.join(kinds) or 'none'}"
        raise CaseFileError(f"{here}: {reason}")
    kind = kinds[0]
    written = body[kind]
    text = _step_text(kind, written)
    if kind == "tool_called" and isinstance(body[kind], str):
        body = {**body, kind: {"tool": body[kind]}}
    try:
        model = _STEP_MODELS[kind].model_validate(body)
    except ValidationError as exc:
        raise CaseFileError(f"{here}: {_reasons(exc)}") from None
    if isinstance(model, _UserStep):
        merged = {**case_metadata, **_metadata(here, model.metadata, metadata)}
        return Step("user", number, line, text, value=model.user, metadata=merged)
    if isinstance(model, _UtterStep):
        return Step("utter", number, line, text, value=model.utter)
    if isinstance(model, _BotStep):
        return Step("bot", number, line, text, value=model.bot)
    if isinstance(model, _SlotWasSet | _SlotWasNotSet):
        entries = model.slot_was_set if isinstance(model, _SlotWasSet) else model.slot_was_not_set
        return Step(kind, number, line, text, slots=_slot_expectations(here, entries))
    if isinstance(model, _ToolCalled):
        call = model.tool_called
        return Step(
            "tool_called", number, line, text, value=call.tool, arguments=call.arguments, times=call.times
        )
    if isinstance(model, _Approval):
        decision = model.approval
        return Step(
            "approval",
            number,
            line,
            text,
            value=decision.by,
            approve=decision.decides == "approve",
            page_answers=decision.page_answers,
        )
    if isinstance(model, _ApprovalExpires):
        return Step("approval_expires", number, line, text, within=model.approval_expires.within)
    assert isinstance(model, _NoToolCalled)
    return Step("no_tool_called", number, line, text, value=model.no_tool_called)


def _step_text(kind: str, written: Any) -> str:
    """How the report shows a step: names (responses, tools, slots) as written, values quoted."""
    if kind in _NAMED and isinstance(written, str):
        return f"{kind}: {written}"
    if kind in ("slot_was_set", "slot_was_not_set") and isinstance(written, list):
        shown: list[str] = []
        for item in written:
            if isinstance(item, dict):
                shown.extend(f"{key}: {_show(value)}" for key, value in item.items())
            else:
                shown.append(str(item))
        return f"{kind}: [{', '.join(shown)}]"
    return f"{kind}: {_show(written)}"


def _slot_expectations(here: str, entries: Sequence[str | dict[str, Any]]) -> tuple[SlotExpectation, ...]:
    expectations: list[SlotExpectation] = []
    for entry in entries:
        if isinstance(entry, str):
            expectations.append(SlotExpectation(entry))
            continue
        if len(entry) != 1:
            raise CaseFileError(f"{here}: each slot is 'name' or 'name: value', got {sorted(entry)}")
        ((name, value),) = entry.items()
        expectations.append(SlotExpectation(name, value, has_value=True))
    if not expectations:
        raise CaseFileError(f"{here}: name at least one slot")
    return tuple(expectations)


# -- YAML with line numbers ----------------------------------------------------------------------


class _LineLoader(yaml.SafeLoader):
    """A safe loader that records each mapping's line (1-based) under a private key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=True)
        mapping[_LINE] = node.start_mark.line + 1
        return mapping


def _strip(value: Any) -> Any:
    """``value`` without the recorded line numbers."""
    if isinstance(value, dict):
        return {key: _strip(item) for key, item in value.items() if key != _LINE}
    if isinstance(value, list):
        return [_strip(item) for item in value]
    return value


def _show(value: Any) -> str:
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, list):
        return "[" + ", ".join(_show(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_show(item)}" for key, item in value.items()) + "}"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def show(value: Any) -> str:
    """How the report writes a value: strings quoted on one line, YAML-like otherwise."""
    return _show(value)


def _reasons(exc: ValidationError) -> str:
    reasons = []
    for error in exc.errors():
        place = ".".join(
            str(part) for part in error["loc"] if not str(part).startswith(("function-", "str", "dict", "_"))
        )
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        reasons.append(f"{place}: {message}" if place else message)
    # pydantic lists one failure per member of a union; one line per place is enough
    unique = list(dict.fromkeys(reasons))
    return "; ".join(unique)
