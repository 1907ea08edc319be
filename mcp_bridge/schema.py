"""Arguments against a tool's input schema: one check for local and MCP tools alike.

A local tool's schema is the one the mcp SDK would publish for the function; an MCP tool's is
the one its server publishes. Either way, arguments the schema rejects are refused before anything
is sent (and before the person is asked about them), with a reason that names the rule that
failed and never the value: arguments can be note text, which stays out of logs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import jsonschema

from mcp_bridge.errors import ToolArgumentsError

__all__ = ["describe_result_problem", "validate_against_schema"]


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
    validator = _validator(schema)
    if validator.is_valid(arguments):
        return
    problems = sorted(validator.iter_errors(arguments), key=lambda error: list(error.absolute_path))
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
