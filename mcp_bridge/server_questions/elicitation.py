"""Questions from an MCP server, asked in the chat: the elicitation state machine.

A server may stop a tool call to ask the person something (MCP elicitation): a **form** (a flat
object of primitive fields: text, number, integer, yes/no, a choice, several choices) or a **URL**
to open (a sign-in, a payment page) that the server wants the person's consent for. This module
turns one such request into questions for the chat and the person's replies into the answer the
server gets back (``ElicitResult``: accept with content, decline, or cancel). It is plain data in
and out, so any replica can carry on from the tracker; what to say is a :class:`Prompt` (a response
name and its variables), never text the server wrote being run as anything but text.

The rules:

* Every question names the server that asks (its name from endpoints.yml), so a question from a
  server is never mistaken for one from the bot.
* A form's fields are asked one at a time, in the order the server lists them; a form of two to
  :data:`ALL_AT_ONCE_FIELDS` fields that are all yes/no or a choice is shown in one question, and a
  reply of ``field: value`` lines answers them all (a reply to the first field alone goes on one at
  a time). Each reply is
  checked against that field's schema (type, choices, length, range, the formats email / date /
  uri); a reply that does not fit is answered with the reason and the same field is asked again.
  An optional field may be skipped ("skip"); a field with a ``default`` (SEP-1034) takes it when
  skipped, or when an all-at-once reply leaves it out, and the question says so.
* "decline" (or a plain no to a URL) declines; "cancel" / "stop" cancels. Either ends the request;
  nothing the person typed for it is sent.
* A URL is shown with its domain set apart ("opens a page on accounts.example.com"), and only a
  plain yes to the explicit consent question accepts. Only ``https:`` is asked about (``http:`` only
  on the loopback, for tests and local servers); a host in another script is shown as the browser
  resolves it, in punycode (``xn--...``, IDNA 2008 with UTS 46, as browsers map it), in the domain
  and in the link, so a look-alike of a known name cannot pass for it. A URL that is not https, carries a
  user name or password, has a host IDNA refuses, or is longer than :data:`MAX_URL`, is declined
  without asking.
* A form that asks for a password, a card number or a token is declined without asking, with the
  reason in :attr:`Replied.reason` and the log (:mod:`mcp_bridge.server_questions.sensitive` has the rules):
  the chat keeps every reply, and the MCP specification says such things are asked through a URL.
* An answer is never a confirmation: the executor asks its own question about a write, before the
  call (see :mod:`mcp_bridge.confirmation.executor`), and a yes here only answers the server.

Answers a reply cannot be: over :data:`MAX_ANSWER` characters, or a form of more than
:data:`MAX_FIELDS` fields (declined unasked: a chat is no place for it). A field's ``pattern`` is
run in RE2, in linear time (:mod:`mcp_bridge.tools.schema`); a form with a pattern RE2 cannot run is
declined unasked.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import idna
import jsonschema

from mcp_bridge.contract import RESPONSES
from mcp_bridge.server_questions.sensitive import refusal
from mcp_bridge.tools.schema import PatternRefusedError, check_schema_patterns, describe_result_problem

__all__ = [
    "ALL_AT_ONCE_FIELDS",
    "MAX_ANSWER",
    "MAX_FIELDS",
    "MAX_URL",
    "Replied",
    "Asked",
    "Field",
    "PendingElicitation",
    "Prompt",
    "begin",
    "prompt_again",
    "reply",
]

# At most this many rounds of questions for one call: a server that keeps asking is stopped.
MAX_ROUNDS = 5
MAX_ANSWER = 2000
MAX_FIELDS = 20
MAX_URL = 2048
# A field's default is shown at most this long in the question.
MAX_SHOWN_DEFAULT = 80

log = logging.getLogger(__name__)
ALL_AT_ONCE_FIELDS = 3

# The responses this module asks the bot to say (mcp_bridge.contract's catalogue: variables there).
ASK_FIELD = RESPONSES.elicitation_field
ASK_ALL = RESPONSES.elicitation_form
ASK_URL = RESPONSES.elicitation_url
INVALID = RESPONSES.elicitation_invalid

Action = Literal["accept", "decline", "cancel"]

_DECLINE = frozenset({"decline", "no", "no thanks", "i decline", "don't", "do not"})
_CANCEL = frozenset({"cancel", "stop", "never mind", "nevermind", "abort"})
_YES = frozenset({"yes", "y", "yes please", "ok", "okay", "sure", "i agree", "agree", "open it"})
_SKIP = frozenset({"skip", "-", "none", "no answer"})
_TRUE = frozenset({"yes", "y", "true", "on", "1"})
_FALSE = frozenset({"no", "n", "false", "off", "0"})
# "name: value" on one line, for all-at-once replies; one quantifier per part, so linear.
_LINE = re.compile(r"^\s*([A-Za-z0-9_.-]{1,64})\s*[:=]\s*(.*)$")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Field:
    """One field of a form, as the server's requested schema describes it."""

    name: str
    schema: dict[str, Any]
    required: bool

    @property
    def title(self) -> str:
        title = self.schema.get("title")
        return str(title) if title else self.name

    @property
    def kind(self) -> str:
        if self.schema.get("type") == "array":
            return "choices"
        if "enum" in self.schema or "oneOf" in self.schema:
            return "choice"
        return str(self.schema.get("type", "string"))

    def choices(self) -> list[str]:
        source = self.schema.get("items", {}) if self.kind == "choices" else self.schema
        if "enum" in source:
            return [str(value) for value in source["enum"]]
        return [str(option.get("const")) for option in source.get("oneOf", source.get("anyOf", []))]


@dataclass(frozen=True)
class Prompt:
    """What to say: a response name and its variables."""

    response: str
    variables: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PendingElicitation:
    """One server request being asked, as it travels in the tracker between turns."""

    server: str
    message: str
    mode: Literal["form", "url"]
    fields: tuple[Field, ...] = ()
    url: str | None = None
    # Where the asking is: the index of the field asked next (form), and the answers so far.
    position: int = 0
    answers: dict[str, Any] = field(default_factory=dict)
    # True when the whole form was asked in one question.
    all_at_once: bool = False

    def to_slot(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_slot(cls, raw: Any) -> PendingElicitation | None:
        """The pending request from a slot value, or None for anything malformed."""
        if not isinstance(raw, Mapping):
            return None
        try:
            fields = tuple(
                Field(str(f["name"]), dict(f["schema"]), bool(f["required"])) for f in raw["fields"]
            )
            mode = raw["mode"]
            if mode not in ("form", "url"):
                return None
            return cls(
                server=str(raw["server"]),
                message=str(raw["message"]),
                mode=mode,
                fields=fields,
                url=None if raw.get("url") is None else str(raw["url"]),
                position=int(raw["position"]),
                answers=dict(raw["answers"]),
                all_at_once=bool(raw.get("all_at_once", False)),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Asked:
    """The request is still open: say ``say`` and keep ``pending`` for the next reply."""

    pending: PendingElicitation
    say: tuple[Prompt, ...]


@dataclass(frozen=True)
class Replied:
    """The request is answered: send ``action`` (and ``content`` with accept) back to the server."""

    action: Action
    content: dict[str, Any] | None = None
    say: tuple[Prompt, ...] = ()
    # Why a question was declined without asking (never a value the person typed).
    reason: str | None = None


def begin(server: str, request: Mapping[str, Any]) -> Asked | Replied:
    """Start asking ``request`` (an ``elicitation/create`` request's params, as the wire has them)."""
    message = str(request.get("message") or "")[:MAX_ANSWER]
    if request.get("mode") == "url":
        shown, problem = _link(str(request.get("url") or ""))
        if shown is None:
            return _refused(server, str(problem))
        pending = PendingElicitation(server=server, message=message, mode="url", url=shown)
        return Asked(pending, (_url_prompt(pending),))
    schema = request.get("requestedSchema") or request.get("requested_schema") or {}
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping) or not properties or len(properties) > MAX_FIELDS:
        return Replied("decline")
    try:
        # A field's pattern the linear-time engine cannot run (mcp_bridge.tools.schema): no reply could
        # be checked against it, so the question is declined unasked.
        check_schema_patterns(f"{server} (a question)", schema)
    except PatternRefusedError:
        return Replied("decline")
    required = set(schema.get("required") or [])
    fields = tuple(Field(str(name), dict(spec), name in required) for name, spec in properties.items())
    sensitive = refusal(message, ((f.name, f.schema) for f in fields))
    if sensitive is not None:
        return _refused(server, sensitive)
    short = 2 <= len(fields) <= ALL_AT_ONCE_FIELDS and all(f.kind in ("boolean", "choice") for f in fields)
    pending = PendingElicitation(
        server=server, message=message, mode="form", fields=fields, all_at_once=short
    )
    return Asked(pending, (_form_prompt(pending),))


def _refused(server: str, reason: str) -> Replied:
    log.warning("MCP server %r asked a question the chat will not ask, declined unasked: %s", server, reason)
    return Replied("decline", reason=reason)


def reply(pending: PendingElicitation, text: str) -> Asked | Replied:
    """Read the person's reply to the question ``pending`` asked."""
    words = _SPACES.sub(" ", text.strip().lower()).strip(" .!")
    if len(text) > MAX_ANSWER:
        reason = f"that is longer than {MAX_ANSWER} characters"
        return Asked(pending, (_invalid(pending, reason), _again(pending)))
    if words in _CANCEL:
        return Replied("cancel")
    if pending.mode == "url":
        if words in _YES:
            return Replied("accept")
        if words in _DECLINE:
            return Replied("decline")
        return Asked(pending, (_invalid(pending, "please answer yes or no"), _url_prompt(pending)))
    if words in _DECLINE and not _expects_no(pending):
        return Replied("decline")
    if pending.all_at_once and _LINE.match(text.splitlines()[0] if text.strip() else ""):
        return _read_all(pending, text)
    return _read_one(pending, text)


def _expects_no(pending: PendingElicitation) -> bool:
    """A plain "no" answers a yes/no field; elsewhere it declines the form."""
    if pending.all_at_once:
        return False
    return pending.fields[pending.position].kind == "boolean"


def _read_one(pending: PendingElicitation, text: str) -> Asked | Replied:
    asked = pending.fields[pending.position]
    value, problem = _parse(asked, text)
    if problem is not None:
        return Asked(pending, (_invalid(pending, problem, asked), _field_prompt(pending, asked)))
    answers = dict(pending.answers)
    if value is not None:
        answers[asked.name] = value
    return _advance(replace(pending, answers=answers, position=pending.position + 1, all_at_once=False))


def _read_all(pending: PendingElicitation, text: str) -> Asked | Replied:
    by_name = {f.name.lower(): f for f in pending.fields}
    by_title = {f.title.lower(): f for f in pending.fields}
    answers: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line)
        named = by_name.get(match.group(1).lower()) or by_title.get(match.group(1).lower()) if match else None
        if match is None or named is None:
            return Asked(
                pending,
                (_invalid(pending, "give each field as `name: value`, one per line"), _again(pending)),
            )
        value, problem = _parse(named, match.group(2))
        if problem is not None:
            return Asked(pending, (_invalid(pending, problem, named), _again(pending)))
        if value is not None:
            answers[named.name] = value
    for left_out in pending.fields:
        has_default, default = _default(left_out)
        if has_default and left_out.name not in answers:
            answers[left_out.name] = default
    missing = [f.title for f in pending.fields if f.required and f.name not in answers]
    if missing:
        reason = f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} needed"
        return Asked(pending, (_invalid(pending, reason), _again(pending)))
    return Replied("accept", answers)


def _advance(pending: PendingElicitation) -> Asked | Replied:
    if pending.position >= len(pending.fields):
        return Replied("accept", dict(pending.answers))
    return Asked(pending, (_field_prompt(pending, pending.fields[pending.position]),))


def _default(asked: Field) -> tuple[bool, Any]:
    """Whether the field has a default that fits its own schema (SEP-1034), and that default."""
    if "default" not in asked.schema:
        return False, None
    value = asked.schema["default"]
    fits = jsonschema.Draft202012Validator(asked.schema).is_valid(value)
    return fits, value if fits else None


def _parse(asked: Field, text: str) -> tuple[Any, str | None]:
    """The reply as the field's type, or why it does not fit (never repeating the reply)."""
    raw = text.strip()
    skipped = raw.lower() == "skip" if asked.kind == "boolean" else raw.lower() in _SKIP
    if skipped:
        has_default, default = _default(asked)
        if has_default:
            return default, None
        if asked.required:
            return None, f"{asked.title} is needed"
        if asked.kind != "boolean":
            return None, None
    kind = asked.kind
    value: Any
    if kind == "boolean":
        lowered = raw.lower()
        if lowered not in _TRUE | _FALSE:
            return None, "please answer yes or no"
        value = lowered in _TRUE
    elif kind == "integer":
        try:
            value = int(raw)
        except ValueError:
            return None, "please give a whole number"
    elif kind == "number":
        try:
            value = float(raw)
        except ValueError:
            return None, "please give a number"
        if value != value or value in (float("inf"), float("-inf")):
            return None, "please give a number"
    elif kind == "choice":
        value = _choice(asked.choices(), raw)
        if value is None:
            return None, f"please pick one of: {', '.join(asked.choices())}"
    elif kind == "choices":
        picked = [_choice(asked.choices(), part) for part in raw.split(",") if part.strip()]
        if any(item is None for item in picked):
            return None, f"please pick from: {', '.join(asked.choices())} (separated by commas)"
        value = picked
    else:
        value = raw
        problem = _format_problem(asked.schema.get("format"), raw)
        if problem is not None:
            return None, problem
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(asked.schema).iter_errors(value))
    if error is not None:
        return None, describe_result_problem(error).replace("the result: ", "")
    return value, None


def _choice(choices: Sequence[str], raw: str) -> str | None:
    wanted = raw.strip().lower()
    for choice in choices:
        if choice.lower() == wanted:
            return choice
    return None


def _format_problem(fmt: Any, raw: str) -> str | None:
    if fmt == "email":
        local, at, domain = raw.partition("@")
        if not (at and local and "." in domain and " " not in raw):
            return "please give an email address"
    elif fmt == "date":
        try:
            date.fromisoformat(raw)
        except ValueError:
            return "please give a date as YYYY-MM-DD"
    elif fmt == "uri" and _domain(raw) is None:
        return "please give a web address (https://...)"
    return None


def _domain(url: str) -> str | None:
    """The host a URL opens, or None for one the person should not be sent to."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password:
        return None
    return parts.hostname


def _link(url: str) -> tuple[str, None] | tuple[None, str]:
    """The URL as the person is shown it, its host in ASCII (punycode for a name in another script,
    as a browser resolves it); or why the person should not be sent there."""
    if len(url) > MAX_URL:
        return None, f"the URL is longer than {MAX_URL} characters"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return None, "the URL has a space or a control character in it"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None, "the URL is not a URL"
    host = parts.hostname
    if parts.scheme not in ("https", "http") or not host:
        return None, "the URL is not an https address"
    if "@" in parts.netloc:
        return None, "the URL has a user name or password in it"
    try:
        ipaddress.ip_address(host)
        ascii_host = host
    except ValueError:
        try:
            ascii_host = idna.encode(host, uts46=True, transitional=False).decode("ascii").lower()
        except (idna.IDNAError, UnicodeError):
            return None, "the URL's host is not a name IDNA accepts"
    if parts.scheme == "http" and not _loopback(ascii_host):
        return None, "the URL is plain http (https only, http on the loopback)"
    netloc = f"[{ascii_host}]" if ":" in ascii_host else ascii_host
    netloc += f":{port}" if port is not None else ""
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _form_prompt(pending: PendingElicitation) -> Prompt:
    if pending.all_at_once:
        lines = [f"{f.name}: {_describe(f)}" for f in pending.fields]
        return Prompt(
            ASK_ALL, {"server": pending.server, "message": pending.message, "fields": "\n".join(lines)}
        )
    return _field_prompt(pending, pending.fields[pending.position])


def _field_prompt(pending: PendingElicitation, asked: Field) -> Prompt:
    return Prompt(
        ASK_FIELD,
        {
            "server": pending.server,
            "message": pending.message,
            "field": asked.title,
            "description": str(asked.schema.get("description") or ""),
            "choices": _describe(asked),
            "optional": _skip_hint(asked),
        },
    )


def _skip_hint(asked: Field) -> str:
    has_default, default = _default(asked)
    if has_default:
        shown = ("yes" if default else "no") if isinstance(default, bool) else str(default)
        return f" (say skip for {shown[:MAX_SHOWN_DEFAULT]})"
    return "" if asked.required else " (optional: say skip to leave it out)"


def _describe(asked: Field) -> str:
    kind = asked.kind
    if kind == "boolean":
        return "yes or no"
    if kind == "choice":
        return "one of " + ", ".join(asked.choices())
    if kind == "choices":
        return "any of " + ", ".join(asked.choices()) + " (separated by commas)"
    if kind in ("integer", "number"):
        low, high = asked.schema.get("minimum"), asked.schema.get("maximum")
        span = f" from {low} to {high}" if low is not None and high is not None else ""
        return ("a whole number" if kind == "integer" else "a number") + span
    formats = {"email": "an email address", "date": "a date (YYYY-MM-DD)", "uri": "a web address"}
    return formats.get(str(asked.schema.get("format")), "text")


def _url_prompt(pending: PendingElicitation) -> Prompt:
    assert pending.url is not None
    return Prompt(
        ASK_URL,
        {
            "server": pending.server,
            "message": pending.message,
            "domain": _domain(pending.url),
            "url": pending.url,
        },
    )


def prompt_again(pending: PendingElicitation) -> Prompt:
    """The question ``pending`` is at, asked again (after an interruption)."""
    return _again(pending)


def _again(pending: PendingElicitation) -> Prompt:
    if pending.mode == "url":
        return _url_prompt(pending)
    return _form_prompt(pending)


def _invalid(pending: PendingElicitation, reason: str, asked: Field | None = None) -> Prompt:
    return Prompt(
        INVALID, {"server": pending.server, "field": asked.title if asked else "", "reason": reason}
    )
