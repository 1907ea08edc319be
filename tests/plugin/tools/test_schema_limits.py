"""A server's schema costs a bounded amount to check, whatever it is (mcp_bridge/tools/schema.py).

Issue 37 measured 1.6 to 2.6 s per validation, on the event loop, for a 1.2 KB schema whose 16 levels
each refer twice to the next (``allOf: [$ref next, $ref next]``): jsonschema follows 2^16 paths. Here
such a schema is refused when compiled, with the reason, before any keyword is evaluated; schemas
within the limits cost at most their expanded keywords per JSON value of what is checked (counted,
never timed: the machine is shared), and a costly check leaves the event loop free for other
conversations. ``make bench`` prints the times (tests/bench/schema_line.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_bridge.errors import ToolArgumentsError
from mcp_bridge.tools import schema


def fan_out(levels: int) -> dict[str, Any]:
    """The issue's schema: each level refers twice to the next."""
    defs: dict[str, Any] = {
        f"l{i}": {"allOf": [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"l{levels}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/l0"}


def keyword_evaluations(compiled: schema.CompiledSchema, value: Any) -> int:
    """How many keywords jsonschema evaluated to check ``value`` (the budget's counter)."""
    budget = schema._running.budget = schema._Budget()
    try:
        list(compiled.validator.iter_errors(value))
    finally:
        schema._running.budget = None
    return schema.MAX_VALIDATION_WORK - budget.left


def test_the_issues_16_level_schema_is_refused_with_its_reason_before_any_keyword_runs() -> None:
    hostile = fan_out(16)
    assert len(json.dumps(hostile)) < 1300  # the issue's 1.2 KB
    for _ in range(3):  # refused on every call, compiled once
        with pytest.raises(schema.SchemaRefusedError) as refused:
            schema.validate_against_schema("deep", hostile, {"a": 1})
        assert "the schema of tool 'deep' is not used" in str(refused.value)
        assert f"fan-out expands it to over {schema.MAX_SCHEMA_COST} keywords" in str(refused.value)
    assert isinstance(refused.value, ToolArgumentsError)  # so the call is refused unsent


def test_the_refusal_is_compiled_once_per_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[int] = []
    real = schema._Expansion.cost

    def counting(self: schema._Expansion) -> int:
        compiled.append(1)
        return real(self)

    monkeypatch.setattr(schema._Expansion, "cost", counting)
    schema._compiled_json.cache_clear()
    hostile, accepted = fan_out(14), fan_out(3)
    for _ in range(5):
        with pytest.raises(schema.SchemaRefusedError):
            schema.check_schema("deep", hostile)
        schema.validate_against_schema("shallow", accepted, {"a": 1})
    assert len(compiled) == 2


@pytest.mark.parametrize("levels", [1, 4, 8, 11])
def test_a_schema_within_the_limits_is_checked_at_most_its_cost_per_value(levels: int) -> None:
    compiled = schema.check_schema("t", fan_out(levels))
    assert compiled.cost <= schema.MAX_SCHEMA_COST
    value = {"a": 1}
    assert keyword_evaluations(compiled, value) <= compiled.cost * schema._json_depth(value, 64, "v")


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ({"type": "object", "description": "x" * schema.MAX_SCHEMA_BYTES}, "bytes of JSON"),
        (
            {"allOf": [{"$ref": f"#/$defs/d{i}"} for i in range(schema.MAX_SCHEMA_REFS + 1)]}
            | {"$defs": {f"d{i}": {"type": "object"} for i in range(schema.MAX_SCHEMA_REFS + 1)}},
            f"over {schema.MAX_SCHEMA_REFS} $ref",
        ),
        ({"$ref": "https://example.com/schema.json"}, "points outside the schema"),
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"$ref": "#thing", "$defs": {"a": {"$anchor": "thing"}}}, "names an anchor"),
        (
            {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
            "recursive",
        ),
        ({"properties": {"next": {"$ref": "#"}}}, "recursive"),
        ({"$dynamicRef": "#meta"}, "$dynamicRef"),
        (
            {"properties": {"a": {"$id": "https://elsewhere.example/a", "type": "string"}}},
            "$id below its top",
        ),
        (
            {"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"a": {"id": "other.json"}}},
            "$id below its top",
        ),
    ],
)
def test_a_schema_beyond_a_limit_is_refused_naming_it(document: dict[str, Any], reason: str) -> None:
    with pytest.raises(schema.SchemaRefusedError, match="is not used") as refused:
        schema.check_schema("t", document)
    assert reason in str(refused.value)


def test_a_schema_nested_too_deep_is_refused() -> None:
    document: dict[str, Any] = {"type": "string"}
    for _ in range(schema.MAX_SCHEMA_DEPTH):
        document = {"properties": {"a": document}}
    with pytest.raises(schema.SchemaRefusedError, match="nest"):
        schema.check_schema("t", document)


def test_property_names_that_look_like_keywords_are_names() -> None:
    """``$ref``, ``$id`` or ``allOf`` as the name of a property is a property, not a keyword."""
    document = {"type": "object", "properties": {"$ref": {"type": "string"}, "$id": {"type": "string"}}}
    schema.validate_against_schema("t", document, {"$ref": "x", "$id": "y"})


def test_a_value_that_takes_more_than_the_budget_is_refused_not_skipped() -> None:
    each = {"$ref": "#/$defs/l0"}  # about 3,000 keywords evaluated an item
    document = {"$defs": fan_out(10)["$defs"], "properties": {"items": {"items": each}}}
    schema.validate_against_schema("t", document, {"items": [{}, {}]})  # two items: within the budget
    with pytest.raises(schema.SchemaRefusedError, match=f"over {schema.MAX_VALIDATION_WORK} steps"):
        schema.validate_against_schema("t", document, {"items": [{} for _ in range(20)]})


def test_a_value_nested_too_deep_is_refused_not_skipped() -> None:
    value: Any = "x"
    for _ in range(schema.MAX_VALUE_DEPTH):
        value = {"a": value}
    with pytest.raises(schema.SchemaRefusedError, match=f"nests over {schema.MAX_VALUE_DEPTH} levels"):
        schema.validate_against_schema("t", {"type": "object"}, {"value": value})


def test_unique_items_is_linear_and_means_what_json_schema_means() -> None:
    unique = {"type": "object", "properties": {"items": {"type": "array", "uniqueItems": True}}}
    many = [{"n": i, "tags": [i, str(i)]} for i in range(20_000)]  # pairwise: 2 * 10^8 comparisons
    schema.validate_against_schema("t", unique, {"items": many})
    for duplicated in ([{"n": 1}, {"n": 1}], [1, 1.0], [[1, {"a": None}], [1, {"a": None}]]):
        with pytest.raises(ToolArgumentsError, match="fails uniqueItems"):
            schema.validate_against_schema("t", unique, {"items": duplicated})
    for distinct in ([True, 1], [False, 0, None], [{"a": 1}, {"a": True}], ["1", 1]):
        schema.validate_against_schema("t", unique, {"items": distinct})


# -- the cost model holds for any schema of the applicators: a property test ---------------------

KEYWORDS = ["allOf", "anyOf", "oneOf", "not", "if", "then", "else", "properties", "items", "prefixItems",
            "contains", "additionalProperties", "patternProperties", "dependentSchemas", "propertyNames",
            "unevaluatedProperties", "unevaluatedItems"]  # fmt: skip


@st.composite
def schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A document of up to 6 definitions, each referring only to later ones (so never recursive)."""
    count = draw(st.integers(1, 6))

    def node(level: int, index: int) -> Any:
        if level > 2 or draw(st.integers(0, 3)) == 0:
            later = list(range(index + 1, count))
            if later and draw(st.booleans()):
                return {"$ref": f"#/$defs/d{draw(st.sampled_from(later))}"}
            return draw(
                st.sampled_from([True, False, {"type": "object"}, {"minLength": 1}, {"type": "integer"}])
            )
        out: dict[str, Any] = {}
        for keyword in draw(st.lists(st.sampled_from(KEYWORDS), max_size=3, unique=True)):
            if keyword in ("allOf", "anyOf", "oneOf", "prefixItems"):
                out[keyword] = [node(level + 1, index) for _ in range(draw(st.integers(1, 3)))]
            elif keyword in ("properties", "patternProperties", "dependentSchemas"):
                names = ["a", "b"] if keyword != "patternProperties" else ["^a", "b$"]
                out[keyword] = {name: node(level + 1, index) for name in names}
            else:
                out[keyword] = node(level + 1, index)
        return out

    defs = {f"d{i}": node(0, i) for i in range(count)}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "ab", ""]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["a", "b", "ab"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), VALUES)
def test_keyword_evaluations_never_exceed_the_cost_times_the_value(
    document: dict[str, Any], value: Any
) -> None:
    try:
        compiled = schema.check_schema("t", document)
    except schema.SchemaRefusedError:
        return  # its fan-out is over the budget: refused before any value is checked
    assert keyword_evaluations(compiled, value) <= compiled.cost * schema._json_depth(value, 64, "v")


# -- the event loop goes on while a costly check runs ----------------------------------------------


async def test_another_conversation_goes_on_while_a_costly_check_runs() -> None:
    """A check near the budget runs in a worker thread: meanwhile the loop keeps turning and another
    conversation's check completes (counted in loop turns, not timed)."""
    costly = {
        "$defs": fan_out(10)["$defs"],
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/l0"}},
        "allOf": [{"$ref": "#/$defs/l0"}],
    }
    value = {"a": {"b": 1}}
    plain = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    hostile = asyncio.create_task(schema.validate_arguments("hostile", costly, value))
    turns, others = 0, 0
    while not hostile.done():
        await asyncio.sleep(0)
        turns += 1
        await schema.validate_arguments("note", plain, {"text": f"note {turns}"})
        others += 1 if not hostile.done() else 0
    await hostile
    print(f"\nwhile one costly check ran: {turns} loop turns, {others} other checks done")
    assert others >= 10
