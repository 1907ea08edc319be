"""The architecture page's words table holds against the code: one meaning per word.

Each row of the table in docs/contributing/architecture.md ("## Words") says what a word means, with the
names that carry that meaning, and what it never means, with patterns of names that would carry it
("Not a name: ..."). Every name the plugin's modules define (a module, and in it a function, a class, a
constant, a class's method or field) is read from the source with ``ast``: each name in the middle
column must be one of them, and none may match a pattern of the last column.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

import mcp_bridge

PACKAGE = Path(mcp_bridge.__file__).resolve().parent
PAGE = Path(__file__).resolve().parents[2] / "docs" / "contributing" / "architecture.md"
_CODE = re.compile(r"`([^`]+)`")


def defined_names() -> set[str]:
    """Every name the modules define, qualified (``mcp_bridge.x.y.Class.method``), and each of its tails
    (``Class.method``, ``method``), so that the table can name it either way."""
    qualified: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        parts = ["mcp_bridge", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        qualified.add(module)

        def add(prefix: str, body: list[ast.stmt]) -> None:
            for node in body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    qualified.add(f"{prefix}.{node.name}")
                    if isinstance(node, ast.ClassDef):
                        add(f"{prefix}.{node.name}", node.body)
                elif isinstance(node, ast.Assign):
                    qualified.update(f"{prefix}.{t.id}" for t in node.targets if isinstance(t, ast.Name))
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    qualified.add(f"{prefix}.{node.target.id}")

        add(module, ast.parse(path.read_text(), str(path)).body)
    names = set(qualified)
    for name in qualified:
        pieces = name.split(".")
        names.update(".".join(pieces[i:]) for i in range(1, len(pieces)))
    return names


def rows() -> list[tuple[str, str, str]]:
    text = PAGE.read_text()
    section = text[text.index("## Words") :]
    section = section[: section.index("\n## ", 1)]
    found = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("word", "---"):
            found.append((cells[0], cells[1], cells[2]))
    return found


NAMES = defined_names()
ROWS = rows()


def test_the_table_has_its_words() -> None:
    words = {word for word, _, _ in ROWS}
    assert {"question", "answer", "held", "refuse", "reject", "resolve", "legacy", "gate, verdict"} <= words


@pytest.mark.parametrize(("word", "means", "never"), ROWS, ids=[row[0] for row in ROWS])
def test_the_names_that_carry_a_word_are_defined(word: str, means: str, never: str) -> None:
    """The names of the middle column, and those the last one gives the other meanings (before "Not a
    name"), are the code's."""
    named = _CODE.findall(means) + _CODE.findall(never.partition("Not a name:")[0])
    missing = [name for name in named if name not in NAMES and not _is_text(name)]
    assert not missing, f"{word!r}: the table names {missing}, which the code does not define"


@pytest.mark.parametrize(("word", "means", "never"), ROWS, ids=[row[0] for row in ROWS])
def test_no_name_carries_what_a_word_never_means(word: str, means: str, never: str) -> None:
    _, _, forbidden = never.partition("Not a name:")
    patterns = _CODE.findall(forbidden)
    clashes = sorted(name for name in NAMES for pattern in patterns if fnmatch.fnmatchcase(name, pattern))
    assert not clashes, f"{word!r} never means that, but these names say it: {clashes}"


def test_a_pattern_would_find_the_name_it_forbids() -> None:
    """The check sees a clash: the names this reshape retired would each be caught."""
    retired = {"mcp_bridge.questions.elicitation", "Permissions.held", "Refuse", "LEGACY", "Answered"}
    patterns = [
        pattern for _, _, never in ROWS for pattern in _CODE.findall(never.partition("Not a name:")[2])
    ]
    for name in retired:
        assert any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns), name


def _is_text(name: str) -> bool:
    """A backticked word that is no name of the code (a slot, an era the tests name)."""
    return name in {"legacy"}
