"""Conditions over slots, in the grammar of Rasa Pro Mantle's ``requires`` (its
``rasa/mantle/skills/conditions.py``): ``session.<namespace>.<entry>`` names a value,
``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` compare, ``and``, ``or``, ``not`` combine, and strings,
numbers, ``True``, ``False`` and ``None`` are constants (parentheses group).

```yaml
requires: "session.transfer_money.amount <= 1000 and not session.project.account_frozen"
```

Rules:

* a reference is always two levels, ``session.<namespace>.<entry>``; the namespace is the skill's own
  id or ``project`` (a skill file names no other: :func:`check_condition`), and either way the value
  is the slot ``<entry>``;
* anything else (a name, a call, ``in``, ``+``, a list, a one-level ``session.x``) is refused when the
  skill is read, never evaluated;
* an unset slot is ``None``; a comparison Python cannot make (``None < 5``) makes the condition false,
  as Mantle's does, so a call whose condition cannot be judged does not run;
* a condition is at most :data:`MAX_CONDITION_CHARS` characters, and it is read by walking its
  syntax tree once: nothing an author writes runs slowly.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from typing import Any

MAX_CONDITION_CHARS = 1000
# The namespace of the whole assistant's memory; the other is the skill's own id.
PROJECT = "project"
_SESSION = "session"
_COMPARISONS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_MEMORY_FORM = "a value is written session.<skill>.<entry> or session.project.<entry>"


def reference(node: ast.AST) -> tuple[str, str] | None:
    """``(namespace, entry)`` when ``node`` is ``session.<namespace>.<entry>``, else None."""
    if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Attribute):
        return None
    namespace = node.value
    if not isinstance(namespace.value, ast.Name) or namespace.value.id != _SESSION:
        return None
    return namespace.attr, node.attr


def parameter_reference(value: str) -> tuple[str, str] | None:
    """``(namespace, entry)`` when the text ``value`` is exactly one ``session.<namespace>.<entry>``
    (Mantle passes such a parameter the value, and any other text as it is)."""
    if len(value) > MAX_CONDITION_CHARS:
        return None
    try:
        tree = ast.parse(value.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return reference(tree.body)


@functools.lru_cache(maxsize=1024)
def _parsed(condition: str) -> ast.expr:
    """The condition's tree, checked; ValueError with the reason when it is not one."""
    if len(condition) > MAX_CONDITION_CHARS:
        raise ValueError(f"a condition is at most {MAX_CONDITION_CHARS} characters")
    try:
        body = ast.parse(condition.strip(), mode="eval").body
        _check(body)
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"not a condition: {exc.msg if isinstance(exc, SyntaxError) else exc}") from None
    except (RecursionError, MemoryError):
        raise ValueError("not a condition: nested too deeply") from None
    return body


def _check(node: ast.AST) -> None:
    """Mantle's grammar (``_ConditionSyntaxValidator``): ValueError naming what is not allowed."""
    if isinstance(node, ast.Constant):
        return
    if isinstance(node, ast.Attribute):
        if reference(node) is None:
            raise ValueError(f"invalid reference: {_MEMORY_FORM}")
        return
    if isinstance(node, ast.Name):
        raise ValueError(f"unknown name {node.id!r}: {_MEMORY_FORM}")
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _check(node.operand)
        return
    if isinstance(node, ast.Compare):
        if not all(isinstance(op, _COMPARISONS) for op in node.ops):
            raise ValueError("only ==, !=, <, <=, > and >= compare")
        for part in (node.left, *node.comparators):
            _check(part)
        return
    raise ValueError(
        f"{type(node).__name__} is not allowed: a condition has references, constants, comparisons, "
        "and, or, not and parentheses"
    )


def references(condition: str) -> list[tuple[str, str]]:
    """Every ``(namespace, entry)`` the condition reads, in order; ValueError when it is not one."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(_parsed(condition)):
        ref = reference(node)
        if ref is not None and ref not in found:
            found.append(ref)
    return found


def check_condition(condition: str, skill_id: str) -> list[str]:
    """The slots ``condition`` reads; ValueError with the reason when it is no condition or names a
    namespace other than ``skill_id`` and ``project``."""
    slots: list[str] = []
    for namespace, entry in references(condition):
        if namespace not in (skill_id, PROJECT):
            raise ValueError(
                f"session.{namespace}.{entry} is another skill's memory: a skill reads its own "
                f"(session.{skill_id}.<entry>) and the project's (session.{PROJECT}.<entry>)"
            )
        if entry not in slots:
            slots.append(entry)
    return slots


class _Unjudged(Exception):
    """A comparison Python cannot make: the condition is false."""


def holds(condition: str, slots: Mapping[str, Any]) -> bool:
    """The condition is true over ``slots`` (``session.<namespace>.<entry>`` is the slot ``entry``);
    false when it cannot be judged."""
    try:
        return bool(_value(_parsed(condition), slots))
    except (_Unjudged, ValueError, RecursionError):
        return False


def _value(node: ast.AST, slots: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    ref = reference(node)
    if ref is not None:
        return slots.get(ref[1])
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_value(value, slots) for value in node.values)
        return any(_value(value, slots) for value in node.values)
    if isinstance(node, ast.UnaryOp):
        return not _value(node.operand, slots)
    if isinstance(node, ast.Compare):
        left = _value(node.left, slots)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _value(comparator, slots)
            try:
                result = _compare(op, left, right)
            except TypeError:
                raise _Unjudged from None
            if not result:
                return False
            left = right
        return True
    raise _Unjudged  # unreachable for a checked condition


def _compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    if isinstance(op, ast.Eq):
        return bool(left == right)
    if isinstance(op, ast.NotEq):
        return bool(left != right)
    if isinstance(op, ast.Lt):
        return bool(left < right)
    if isinstance(op, ast.LtE):
        return bool(left <= right)
    if isinstance(op, ast.Gt):
        return bool(left > right)
    return bool(left >= right)
