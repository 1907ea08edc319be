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

Schemas from servers are bounded too, in what they cost to check (:func:`compiled`), once per schema:

``limits``
   A schema is compiled once (per schema object, and per value for equal ones) and refused, with the
   reason, when its JSON is over :data:`MAX_SCHEMA_BYTES`, it nests over :data:`MAX_SCHEMA_DEPTH`
   levels, it has over :data:`MAX_SCHEMA_REFS` ``$ref`` (or one that is not a JSON pointer into the
   schema itself, does not resolve, or leads back to where it is: a recursive schema), a
   ``$dynamicRef``, ``$recursiveRef`` or an ``$id`` below the top, or when its ``$ref`` / ``allOf``
   fan-out expands it to over :data:`MAX_SCHEMA_COST` keywords (a schema whose levels each refer
   twice to the next doubles with every level: 16 levels of 1.2 KB are 262,000 keywords, checked in
   seconds by jsonschema). A refused input schema refuses every call before it is sent; a refused
   output schema too, since the result could not be checked: the tool is unavailable, and says why
   (:class:`SchemaRefusedError`).
``linear``
   Checking a value costs at most the schema's expanded keywords times the value's size (its JSON
   values and keys): jsonschema evaluates each keyword of the expanded schema at most once per value,
   and ``uniqueItems``, quadratic in jsonschema, is checked here by hashing. Each check also counts its
   keyword evaluations and stops at :data:`MAX_VALIDATION_WORK`, and a value nested over
   :data:`MAX_VALUE_DEPTH` levels is not checked: refused, never skipped.
``off_the_loop``
   A check that may cost over :data:`INLINE_WORK` keyword evaluations runs in one worker thread
   shared by all (:func:`validate_arguments`, :func:`result_problem`), so the event loop, and every
   other conversation, goes on while it runs (one busy thread shares the GIL with the loop; several
   would starve it); cheaper ones run in line, where a thread would cost more than the check.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import jsonschema
import jsonschema._keywords
import jsonschema._legacy_keywords
import jsonschema._utils
import jsonschema.validators
import re2

from mcp_bridge.errors import ToolArgumentsError

__all__ = [
    "INLINE_WORK",
    "MAX_PATTERN_CHARS",
    "MAX_PATTERN_INPUT_CHARS",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_COST",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_REFS",
    "MAX_VALIDATION_WORK",
    "MAX_VALUE_DEPTH",
    "CompiledSchema",
    "PatternRefusedError",
    "SchemaRefusedError",
    "check_schema",
    "check_schema_patterns",
    "checked",
    "compiled",
    "describe_result_problem",
    "linear_search",
    "result_problem",
    "validate_against_schema",
    "validate_arguments",
]

MAX_PATTERN_CHARS = 1_000
MAX_PATTERN_INPUT_CHARS = 100_000
# A schema's JSON, its nesting, its $ref keywords, and its keywords once every $ref is expanded.
MAX_SCHEMA_BYTES = 128 * 1024
MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_REFS = 256
MAX_SCHEMA_COST = 20_000
# Keyword evaluations one check may make; a value nested deeper is not checked.
MAX_VALIDATION_WORK = 50_000
MAX_VALUE_DEPTH = 64
# A check that may cost more runs in a worker thread.
INLINE_WORK = 1_000
# The problems a refusal names, each once (a schema can find thousands).
MAX_PROBLEMS_SAID = 5


class SchemaRefusedError(ToolArgumentsError):
    """A server's schema that is not used, or a value not checked against it: beyond its limits."""


class PatternRefusedError(SchemaRefusedError):
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


def check_schema(name: str, schema: Any) -> CompiledSchema:
    """``schema`` compiled (``limits``), or :class:`SchemaRefusedError` naming tool ``name`` and why;
    patterns first (:func:`check_schema_patterns`)."""
    check_schema_patterns(name, schema)
    return compiled(name, schema)


async def checked(name: str, schema: Any) -> CompiledSchema:
    """:func:`check_schema`, a large schema compiled off the event loop the first time."""
    known = _known(schema)
    if known is not None:
        check_schema_patterns(name, schema)
        return known
    made: CompiledSchema = await _maybe_off_loop(_rough_size(schema), lambda: check_schema(name, schema))
    return made


def validate_against_schema(name: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """Raise :class:`ToolArgumentsError` when ``arguments`` cannot be sent or ``schema`` rejects them
    (in line, whatever it costs: :func:`validate_arguments` runs a costly check off the event loop)."""
    arguments = _sendable(name, arguments)
    schema_check = check_schema(name, schema)
    _value_size(name, arguments, "arguments")
    _check_arguments(name, schema_check, arguments)


async def validate_arguments(name: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """:func:`validate_against_schema`, with the compiling and the check of a costly schema or value in a
    worker thread (``off_the_loop``)."""
    arguments = _sendable(name, arguments)
    schema_check = await checked(name, schema)
    work = schema_check.cost * _value_size(name, arguments, "arguments")
    await _maybe_off_loop(work, lambda: _check_arguments(name, schema_check, arguments))


async def result_problem(
    name: str, schema: Mapping[str, Any], value: Any
) -> jsonschema.ValidationError | None:
    """Where a tool's result ``value`` breaks its output ``schema`` (the first problem, as jsonschema's
    ``best_match`` picks it), or None; :class:`SchemaRefusedError` when it cannot be checked. A costly
    check runs off the event loop."""
    schema_check = await checked(name, schema)
    work = schema_check.cost * _value_size(name, value, "the result")

    def check() -> jsonschema.ValidationError | None:
        return _within_budget(
            name, lambda: jsonschema.exceptions.best_match(schema_check.validator.iter_errors(value))
        )

    return await _maybe_off_loop(work, check)


def _sendable(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    arguments = dict(arguments)
    try:
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError):
        # An unpaired surrogate (which JSON from a chat channel can carry) has no UTF-8 form: no
        # server could receive it, and the SDK's transport would fail on it mid-send.
        raise ToolArgumentsError(
            f"arguments for tool {name!r} contain a value that cannot be sent (not valid UTF-8 text)"
        ) from None
    return arguments


def _check_arguments(name: str, schema_check: CompiledSchema, arguments: dict[str, Any]) -> None:
    validator = schema_check.validator

    def problems() -> list[jsonschema.ValidationError]:
        if validator.is_valid(arguments):
            return []
        return sorted(validator.iter_errors(arguments), key=lambda error: list(error.absolute_path))

    try:
        found = _within_budget(name, problems)
    except PatternRefusedError as exc:
        raise PatternRefusedError(f"arguments for tool {name!r} cannot be checked: {exc}") from None
    if found:
        described = list(dict.fromkeys(_describe_problem(problem) for problem in found))
        details = "; ".join(described[:MAX_PROBLEMS_SAID])
        if len(described) > MAX_PROBLEMS_SAID:
            details += f"; and {len(described) - MAX_PROBLEMS_SAID} more"
        raise ToolArgumentsError(f"arguments for tool {name!r} do not match its input schema: {details}")


# One worker thread for every costly check: CPython gives the GIL to no thread in particular, so
# several busy threads would starve the event loop's; one shares it with the loop (measured:
# tests/bench/schema_line.py). Costly checks wait for each other there; cheap ones run in line.
_CHECKS = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="schema-check")


async def _maybe_off_loop(work: int, check: Callable[[], Any]) -> Any:
    """``check()`` in line when ``work`` is at most :data:`INLINE_WORK`, else in the worker thread."""
    if work <= INLINE_WORK:
        return check()
    return await asyncio.get_running_loop().run_in_executor(_CHECKS, check)


# -- compiling: limits, once per schema ------------------------------------------------------------


@dataclass(frozen=True)
class CompiledSchema:
    """A server's schema, checked against the limits: its validator and its cost, the keywords of the
    schema with every ``$ref`` expanded (what checking one value costs at most, per JSON value)."""

    validator: Any
    cost: int


# Schema object -> (the object, its compiled form or why it is refused): held, so its id stays its own.
_compiled_by_id: dict[int, tuple[Any, CompiledSchema | str]] = {}


def _known(schema: Any) -> CompiledSchema | None:
    cached = _compiled_by_id.get(id(schema))
    if cached is not None and cached[0] is schema and isinstance(cached[1], CompiledSchema):
        return cached[1]
    return None


def compiled(name: str, schema: Any) -> CompiledSchema:
    """``schema`` compiled once (``limits``): raises :class:`SchemaRefusedError` naming tool ``name``
    and the limit, on every call, for a schema beyond them."""
    cached = _compiled_by_id.get(id(schema))
    if cached is None or cached[0] is not schema:
        try:
            text = json.dumps(schema, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError):
            outcome: CompiledSchema | str = "it is not JSON"
        else:
            outcome = (
                _compiled_json(text)
                if len(text) <= MAX_SCHEMA_BYTES
                else (f"it is {len(text)} bytes of JSON (the most is {MAX_SCHEMA_BYTES})")
            )
        if len(_compiled_by_id) >= 1024:
            _compiled_by_id.clear()
        cached = _compiled_by_id[id(schema)] = (schema, outcome)
    if isinstance(cached[1], str):
        raise SchemaRefusedError(f"the schema of tool {name!r} is not used: {cached[1]}")
    return cached[1]


@functools.lru_cache(maxsize=256)
def _compiled_json(text: str) -> CompiledSchema | str:
    """Equal schemas (by their JSON) share one compiled form; a string is why it is refused."""
    schema = json.loads(text)
    if not isinstance(schema, dict | bool):
        return "it is not a JSON Schema (an object or a boolean)"
    try:
        cost = _Expansion(schema).cost()
    except _Refused as exc:
        return str(exc)
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return CompiledSchema(_bounded(base)(schema), cost)


class _Refused(Exception):
    """Why a schema is beyond the limits."""


# Keywords whose value holds subschemas, by how: one schema, a list of them, or a mapping to them.
_ONE = {
    "additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then",
    "else", "unevaluatedItems", "unevaluatedProperties",
}  # fmt: skip
_LIST = {"allOf", "anyOf", "oneOf", "prefixItems"}
_MAP = {"properties", "patternProperties", "dependentSchemas", "dependencies"}
_DEFINITIONS = {"$defs", "definitions"}  # applied only through a $ref
# What jsonschema's unevaluatedProperties / unevaluatedItems validate again, in place.
_AGAIN = {"allOf", "anyOf", "oneOf"}
_REFUSED_KEYWORDS = {"$dynamicRef": "a $dynamicRef", "$recursiveRef": "a $recursiveRef"}


def _subschemas(keyword: str, value: Any) -> list[Any]:
    """The subschemas under ``keyword`` (``items`` is one schema, or a list of them before 2020-12)."""
    if keyword in _ONE or (keyword == "items" and not isinstance(value, list)):
        return [value] if isinstance(value, dict | bool) else []
    if keyword in _LIST or keyword == "items":
        return [item for item in value if isinstance(item, dict | bool)] if isinstance(value, list) else []
    if keyword in _MAP or keyword in _DEFINITIONS:
        if isinstance(value, dict):
            return [item for item in value.values() if isinstance(item, dict | bool)]
    return []


class _Expansion:
    """The limits, checked over one schema document: its depth, its $ref, its expanded cost."""

    def __init__(self, root: dict[str, Any] | bool) -> None:
        self.root = root
        self.refs = 0
        dialect = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        # Drafts 3 and 4 name a schema's base "id", the later ones "$id".
        self.ids = ("$id", "id") if re.search(r"draft-0[34]", dialect) else ("$id",)

    def cost(self) -> int:
        _json_depth(self.root, MAX_SCHEMA_DEPTH, "the schema")
        nodes = self._nodes()
        order = self._post_order(nodes)
        expanded: dict[int, int] = {}
        again: dict[int, int] = {}
        for node in order:  # every node after what it applies
            expanded[id(node)] = self._expanded(node, expanded, again)
        total = expanded[id(self.root)]
        if total > MAX_SCHEMA_COST:
            raise _Refused(
                f"its $ref / allOf fan-out expands it to over {MAX_SCHEMA_COST} keywords, "
                "too many to check in time"
            )
        return total

    def _nodes(self) -> list[Any]:
        """Every subschema of the document (definitions included), each once."""
        seen: dict[int, Any] = {}
        stack = [self.root]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen[id(node)] = node
            if not isinstance(node, dict):
                continue
            for keyword, why in _REFUSED_KEYWORDS.items():
                if keyword in node:
                    raise _Refused(f"it has {why}, which is not followed")
            if node is not self.root and any(isinstance(node.get(key), str) for key in self.ids):
                raise _Refused("it has an $id below its top, which would change what its $ref mean")
            if "$ref" in node:
                self.refs += 1
                if self.refs > MAX_SCHEMA_REFS:
                    raise _Refused(f"it has over {MAX_SCHEMA_REFS} $ref")
                self._target(node["$ref"])  # resolves, or refuses
            for keyword, value in node.items():
                stack.extend(_subschemas(keyword, value))
        return list(seen.values())

    def _target(self, ref: Any) -> Any:
        """What ``ref`` points at: only a JSON pointer into this document (``#``, ``#/$defs/x``)."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _Refused(f"its $ref {str(ref)[:80]!r} points outside the schema, which is not followed")
        pointer = unquote(ref[1:])
        node: Any = self.root
        if pointer == "":
            return node
        if not pointer.startswith("/"):
            raise _Refused(f"its $ref {ref[:80]!r} names an anchor, which is not followed")
        for part in pointer[1:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise _Refused(f"its $ref {ref[:80]!r} does not resolve")
        if not isinstance(node, dict | bool):
            raise _Refused(f"its $ref {ref[:80]!r} does not point at a schema")
        return node

    def _applies(self, node: Any) -> list[Any]:
        """The subschemas applied when ``node`` is (its $ref's target included; not its definitions)."""
        if not isinstance(node, dict):
            return []
        applied = [
            sub
            for keyword, value in node.items()
            if keyword not in _DEFINITIONS
            for sub in _subschemas(keyword, value)
        ]
        if "$ref" in node:
            applied.append(self._target(node["$ref"]))
        return applied

    def _post_order(self, nodes: list[Any]) -> list[Any]:
        """The nodes, each after every node it applies; a node that applies itself again is refused."""
        state: dict[int, int] = {}  # 1: on the path, 2: done
        order: list[Any] = []
        for start in nodes:
            if id(start) in state:
                continue
            path: list[tuple[Any, Iterator[Any]]] = [(start, iter(self._applies(start)))]
            state[id(start)] = 1
            while path:
                node, children = path[-1]
                child = next(children, None)
                if child is None:
                    path.pop()
                    state[id(node)] = 2
                    order.append(node)
                elif state.get(id(child)) == 1:
                    raise _Refused(
                        "its $ref lead back to where they are (a recursive schema), which is not followed"
                    )
                elif id(child) not in state:
                    state[id(child)] = 1
                    path.append((child, iter(self._applies(child))))
        return order

    def _expanded(self, node: Any, expanded: dict[int, int], again: dict[int, int]) -> int:
        """Keywords evaluated, at most, when ``node`` is applied to one value (children before)."""
        if not isinstance(node, dict):
            again[id(node)] = 0
            return 1
        total = 1 + len(node) + sum(expanded[id(sub)] for sub in self._applies(node))
        # What unevaluatedProperties / unevaluatedItems make jsonschema validate again.
        redo = 0
        for keyword in _AGAIN:
            for sub in _subschemas(keyword, node.get(keyword)):
                redo += expanded[id(sub)] + again[id(sub)]
        for keyword in ("dependentSchemas", "dependencies", "then", "else"):
            redo += sum(again[id(sub)] for sub in _subschemas(keyword, node.get(keyword)))
        for keyword in ("if", "contains"):
            redo += sum(expanded[id(sub)] + again[id(sub)] for sub in _subschemas(keyword, node.get(keyword)))
        if "$ref" in node:
            redo += again[id(self._target(node["$ref"]))]
        again[id(node)] = min(redo, MAX_SCHEMA_COST + 1)
        if "unevaluatedProperties" in node or "unevaluatedItems" in node:
            total += redo
        return min(total, MAX_SCHEMA_COST + 1)  # past the limit it is refused anyway


def _json_depth(value: Any, limit: int, what: str) -> int:
    """The number of JSON values and object keys in ``value``; :class:`_Refused` past ``limit`` levels."""
    count = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if depth > limit:
            raise _Refused(f"{what} nests over {limit} levels")
        if isinstance(node, dict):
            count += len(node)
            stack.extend((item, depth + 1) for item in node.values())
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
    return count


def _value_size(name: str, value: Any, what: str) -> int:
    """The JSON values and keys of ``value`` (a check costs at most its schema's cost times this)."""
    try:
        return _json_depth(value, MAX_VALUE_DEPTH, what)
    except _Refused as exc:
        raise SchemaRefusedError(f"{what} of tool {name!r} cannot be checked: {exc}") from None


def _rough_size(schema: Any) -> int:
    """What compiling ``schema`` may cost, roughly (its JSON values), without walking it all."""
    try:
        return len(json.dumps(schema)) // 8
    except (TypeError, ValueError):
        return 0


# -- checking: keyword evaluations counted, uniqueItems linear --------------------------------------


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_VALIDATION_WORK


class _Exhausted(Exception):
    pass


# The budget of the check running in this thread: a check runs start to end in one thread, with no
# await in it, so one thread runs one check at a time.
_running = threading.local()


def _within_budget(name: str, check: Callable[[], Any]) -> Any:
    """``check()`` with at most :data:`MAX_VALIDATION_WORK` keyword evaluations (``linear``)."""
    _running.budget = _Budget()
    try:
        return check()
    except _Exhausted:
        raise SchemaRefusedError(
            f"a value for tool {name!r} cannot be checked: its schema took over {MAX_VALIDATION_WORK} "
            "steps on it"
        ) from None
    except RecursionError:
        raise SchemaRefusedError(
            f"a value for tool {name!r} cannot be checked: its schema nests too deep"
        ) from None
    finally:
        _running.budget = None


def _counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget: _Budget | None = getattr(_running, "budget", None)
        if budget is not None:
            budget.left -= 1
            if budget.left < 0:
                raise _Exhausted
        return keyword(validator, value, instance, schema)

    return counted


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[jsonschema.ValidationError]:
    """``uniqueItems`` in linear time: each item hashed in JSON's sense of equal (1 and 1.0 are equal,
    true and 1 are not); jsonschema compares unhashable items pairwise, in quadratic time."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _json_key(item)
        if key in seen:
            yield jsonschema.ValidationError("has non-unique elements")
            return
        seen.add(key)


def _json_key(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_json_key(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((key, _json_key(item)) for key, item in value.items()))
    return ("?", repr(value))


@functools.cache
def _bounded(base: Any) -> type:
    """``base`` (a jsonschema validator class) with every keyword counted and uniqueItems linear."""
    keywords = {name: _counted(function) for name, function in base.VALIDATORS.items()}
    if "uniqueItems" in keywords:
        keywords["uniqueItems"] = _counted(_unique_items)
    return jsonschema.validators.extend(base, keywords)  # type: ignore[no-any-return]


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
