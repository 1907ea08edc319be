"""Arguments against a tool's input schema: one check for local and MCP tools alike.

A local tool's schema is the one the mcp SDK would publish for the function; an MCP tool's is
the one its server publishes. Either way, arguments the schema rejects are refused before anything
is sent (and before the person is asked about them), with a reason that names the rule that
failed and never the value: arguments can be note text, which stays out of logs.

Patterns in a schema come from MCP servers (a tool's input and output schema, an elicitation's
fields), so they are run in a linear-time engine, RE2 (``google-re2``), never by Python's ``re``,
whose backtracking takes exponential time on a pattern like ``^(a+)+$``. jsonschema runs every
``pattern`` and ``patternProperties`` (and the ``additionalProperties`` and
``unevaluatedProperties`` that depend on them) through the ``re.search`` of its keyword modules;
importing this module points those at :func:`linear_search`, for every validator in the process,
the mcp SDK's check of a result against a tool's output schema included. A pattern RE2 cannot run
(a backreference, a lookaround), one over :data:`MAX_PATTERN_CHARS` characters, or a text over
:data:`MAX_PATTERN_INPUT_CHARS` characters to match is not skipped: it raises
:class:`PatternRefusedError`, so the schema counts as one that cannot be checked and the call is
refused before it is sent (:func:`check_schema_patterns` runs every pattern of a schema at once).
RE2 reads JSON Schema's (ECMA-262) patterns as ECMA does in the common cases: ``\\d`` and ``\\w``
are ASCII, ``\\p{L}`` is a Unicode class.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema._keywords
import jsonschema._legacy_keywords
import jsonschema._utils
import re2

from mcp_bridge.errors import ToolArgumentsError

__all__ = [
    "MAX_PATTERN_CHARS",
    "MAX_PATTERN_INPUT_CHARS",
    "PatternRefusedError",
    "check_schema_patterns",
    "describe_result_problem",
    "linear_search",
    "validate_against_schema",
]

MAX_PATTERN_CHARS = 1_000
MAX_PATTERN_INPUT_CHARS = 100_000


class PatternRefusedError(ToolArgumentsError):
    """A schema's pattern that is not run: RE2 cannot compile it, or it or the text is too long."""


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the refusal says why; RE2's own line on stderr would repeat it
_RE2_OPTIONS.max_mem = 8 << 20  # RE2's own bound on one compiled pattern's memory, made explicit


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternRefusedError(
            f"a schema pattern of {len(pattern)} characters (the most is {MAX_PATTERN_CHARS}) is not run"
        )
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error:
        raise PatternRefusedError(
            f"the schema pattern {pattern[:80]!r} cannot be run in linear time "
            "(a backreference, a lookaround or another construct RE2 does not have)"
        ) from None


def linear_search(pattern: str, text: str) -> Any:
    """``re.search`` for jsonschema, in RE2: linear in the text, refused rather than skipped."""
    compiled = _compiled(pattern)
    if len(text) > MAX_PATTERN_INPUT_CHARS:
        raise PatternRefusedError(
            f"a text of {len(text)} characters (the most is {MAX_PATTERN_INPUT_CHARS}) "
            "is not matched against a schema pattern"
        )
    return compiled.search(text)


class _LinearRe:
    """What jsonschema's keyword modules see as ``re``: ``search`` in RE2, the rest Python's."""

    search = staticmethod(linear_search)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


def _install_linear_patterns() -> None:
    for module in (jsonschema._keywords, jsonschema._utils, jsonschema._legacy_keywords):
        if getattr(module, "re", None) is not re and not isinstance(getattr(module, "re", None), _LinearRe):
            # A jsonschema that no longer reads patterns through its module's ``re``: refuse to
            # start rather than run servers' patterns in a backtracking engine unnoticed.
            raise ImportError(f"{module.__name__} has no 're' to point at RE2 (jsonschema changed?)")
        module.re = _LinearRe()


_install_linear_patterns()


def check_schema_patterns(name: str, schema: Any) -> None:
    """Raise :class:`PatternRefusedError` naming tool ``name`` when a pattern anywhere in
    ``schema`` (a ``pattern`` string, a ``patternProperties`` key) cannot be run.

    The schema is walked once per schema object, as its validator is built once: a tool's schema
    object lives as long as its catalogue entry, and the walk was most of the bridge's own CPU per
    MCP call (docs/reports/mcp-cpu.md). A new catalogue brings new objects, which are walked again.
    """
    refusal = _pattern_refusal(schema)
    if refusal is not None:
        raise PatternRefusedError(f"the schema of tool {name!r} cannot be checked: {refusal}")


# Schema object -> (the object, why a pattern in it cannot be run, or None): held, so its id stays its own.
_checked_by_id: dict[int, tuple[Any, str | None]] = {}


def _pattern_refusal(schema: Any) -> str | None:
    cached = _checked_by_id.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    refusal = None
    try:
        for pattern in _patterns(schema, depth=0):
            _compiled(pattern)
    except PatternRefusedError as exc:
        refusal = str(exc)
    if len(_checked_by_id) >= 1024:
        _checked_by_id.clear()
    _checked_by_id[id(schema)] = (schema, refusal)
    return refusal


def _patterns(node: Any, depth: int) -> Iterator[str]:
    # Every string under a "pattern" key and every key of a "patternProperties" object, wherever
    # it sits (a "const" that happens to hold one too: refusing more is the safe side).
    if depth > 64:
        raise PatternRefusedError("a schema nested over 64 levels deep is not checked")
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, Mapping):
                yield from (str(pattern) for pattern in value)
            yield from _patterns(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield from _patterns(item, depth + 1)


def validate_against_schema(name: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """Raise :class:`ToolArgumentsError` when ``arguments`` cannot be sent or ``schema`` rejects them."""
    arguments = dict(arguments)
    try:
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError):
        # An unpaired surrogate (which JSON from a chat channel can carry) has no UTF-8 form: no
        # server could receive it, and the SDK's transport would fail on it mid-send.
        raise ToolArgumentsError(
            f"arguments for tool {name!r} contain a value that cannot be sent (not valid UTF-8 text)"
        ) from None
    check_schema_patterns(name, schema)
    validator = _validator(schema)
    try:
        if validator.is_valid(arguments):
            return
        problems = sorted(validator.iter_errors(arguments), key=lambda error: list(error.absolute_path))
    except PatternRefusedError as exc:
        raise PatternRefusedError(f"arguments for tool {name!r} cannot be checked: {exc}") from None
    if problems:
        details = "; ".join(_describe_problem(problem) for problem in problems)
        raise ToolArgumentsError(f"arguments for tool {name!r} do not match its input schema: {details}")


# Validators by schema object: a tool's schema object lives as long as its catalogue entry, so
# the common case is an identity hit; equal schemas in new objects share one validator by value.
_validators_by_id: dict[int, tuple[Mapping[str, Any], jsonschema.Draft202012Validator]] = {}


def _validator(schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    cached = _validators_by_id.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    validator = _validator_for_json(json.dumps(schema, sort_keys=True))
    if len(_validators_by_id) >= 1024:
        _validators_by_id.clear()
    _validators_by_id[id(schema)] = (schema, validator)  # holds the schema, so its id stays its own
    return validator


@functools.lru_cache(maxsize=256)
def _validator_for_json(schema_json: str) -> jsonschema.Draft202012Validator:
    # Building a validator costs more than using one, and every confirmed write validates twice.
    return jsonschema.Draft202012Validator(json.loads(schema_json))


def describe_result_problem(problem: jsonschema.ValidationError) -> str:
    """Where a tool's result breaks its output schema and which rule, without the value (a result
    can carry note text, which stays out of logs)."""
    return _describe_problem(problem, whole="the result")


def _describe_problem(problem: jsonschema.ValidationError, whole: str = "arguments") -> str:
    """The rule that failed, without the value: arguments can be note text, which stays out of logs."""
    where = ".".join(map(str, problem.absolute_path)) or whole
    rule, limit = problem.validator, problem.validator_value
    if rule == "required":
        return str(problem.message)  # names the missing key only
    if rule == "type":
        return f"{where}: must be of type {limit}"
    if rule == "maxLength":
        return f"{where}: longer than {limit} characters"
    if rule == "minLength":
        return f"{where}: shorter than {limit} characters"
    if rule == "additionalProperties":
        return f"{where}: unexpected {'argument' if whole == 'arguments' else 'key'}(s)"
    return f"{where}: fails {rule} {limit!r}"
