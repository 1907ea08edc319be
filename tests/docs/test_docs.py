"""The documentation: the reference pages say what the code says, every page is reachable from the
site's navigation, and the README's first screen is the one a bot author needs.

The reference check is proven against a copy of the code in which something changed (a default, a
new variable, a new skill key): the committed pages then no longer match, and the check says so.
``make docs`` (in ``make test``) builds the site with ``mkdocs build --strict``; these tests need
no build.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
GENERATOR = Path("scripts") / "docs_reference.py"


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / GENERATOR), "--check"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The code the generator reads and the committed pages, copied: a checkout to change."""
    root = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "node_modules", "var", "*.sqlite3")
    shutil.copytree(REPO / "mcp_bridge", root / "mcp_bridge", ignore=ignore)
    shutil.copytree(REPO / "scripts", root / "scripts", ignore=ignore)
    shutil.copytree(DOCS / "reference", root / "docs" / "reference")
    for part in ("crm", "actions"):
        shutil.copytree(
            REPO / "examples" / "crm_bot" / part, root / "examples" / "crm_bot" / part, ignore=ignore
        )
    return root


def change(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: {old!r} is not there once; the test needs updating"
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_the_committed_reference_pages_are_what_the_code_says(copy: Path) -> None:
    """The committed pages match the code (in the copy, so that what fails below is the change alone)."""
    result = run_check(copy)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_setting_whose_default_changed_fails_the_check(copy: Path) -> None:
    change(
        copy / "mcp_bridge" / "config" / "settings.py",
        '"CONFIRMATION_TTL_SECONDS",\n        300.0,',
        '"CONFIRMATION_TTL_SECONDS",\n        600.0,',
    )
    result = run_check(copy)
    assert result.returncode == 1
    assert "docs/reference/environment.md" in result.stderr
    changed = [line for line in result.stdout.splitlines() if line.startswith(("-|", "+|"))]
    assert any("CONFIRMATION_TTL_SECONDS" in line and "`300.0`" in line for line in changed if line[0] == "-")
    assert any("CONFIRMATION_TTL_SECONDS" in line and "`600.0`" in line for line in changed if line[0] == "+")


def test_a_setting_without_a_meaning_fails_the_check(copy: Path) -> None:
    change(
        copy / "mcp_bridge" / "config" / "settings.py",
        '"The bot\'s domain, a file or a domain directory."',
        '""',
    )
    result = run_check(copy)
    assert result.returncode == 1
    assert "Settings.domain: no meaning in its metadata" in result.stderr


def test_a_setting_nothing_reads_fails_the_check(copy: Path) -> None:
    change(copy / "mcp_bridge" / "cli" / "tools.py", "settings.operator_token", "None")
    change(copy / "mcp_bridge" / "cli" / "check.py", "config.operator_token", "None")
    result = run_check(copy)
    assert result.returncode == 1
    assert "MCP_OPERATOR_TOKEN (operator_token) is read nowhere" in result.stderr


@pytest.mark.parametrize(
    ("module", "old", "new", "said"),
    [
        (
            "action_server/build.py",
            "    domain = config.domain\n",
            '    domain = config.domain\n    os.environ.get("MCP_BRIDGE_NEW_SETTING", "7")\n',
            "mcp_bridge.action_server.build:build_executor reads the process's environment",
        ),
        (
            "observability/audit.py",
            "        keys = AuditKeys.from_settings(settings)\n",
            "        keys = AuditKeys.from_settings(settings)\n        env = dict(settings.environ)\n"
            '        env.get("AUDIT_KEY")\n',
            "mcp_bridge.observability.audit:from_settings reads the environment variable AUDIT_KEY",
        ),
    ],
)
def test_a_read_of_the_environment_outside_the_settings_fails_the_check(
    copy: Path, module: str, old: str, new: str, said: str
) -> None:
    """Only mcp_bridge/config/settings.py (and the channels, in Rasa's process) read the environment."""
    change(copy / "mcp_bridge" / module, old, new)
    result = run_check(copy)
    assert result.returncode == 1
    assert said in result.stderr


def test_a_new_key_of_a_skill_file_fails_the_check(copy: Path) -> None:
    change(
        copy / "mcp_bridge" / "skills" / "files.py",
        "    on_missing_argument: str | None = None\n",
        "    on_missing_argument: str | None = None\n    retries: int = 0\n",
    )
    result = run_check(copy)
    assert result.returncode == 1
    assert "skill_file: 'steps[].retries' has no description" in result.stderr
    assert "docs/reference/skill-file.md" in result.stderr


def nav_pages(entries: object) -> list[str]:
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in nav_pages(value)]
    raise AssertionError(f"unexpected nav entry {entries!r}")


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    assert sorted(set(listed)) == pages, "pages not in the nav, or nav entries that are not pages"
    assert len(listed) == len(set(listed)), "a page is in the nav twice"


def readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_a_few_screens_and_its_first_screen_has_the_skill_and_the_install() -> None:
    text = readme()
    assert len(text.encode()) <= 11_000, f"README.md is {len(text.encode())} bytes; the rest belongs in docs/"
    first_screen = "\n".join(text.splitlines()[:45])
    for needed in ("requires_confirmation", "import mcp_bridge.rasa", "pip install", "mcp-bridge init"):
        assert needed in first_screen, f"{needed!r} is not on the README's first screen"
    assert "make test" in text, "CI and contributors look for the test command in the README"


def test_the_readmes_skill_is_a_valid_skill_file(tmp_path: Path) -> None:
    from mcp_bridge.skills.files import read_skill_file

    blocks = re.findall(r"```yaml\n(.*?)```", readme(), flags=re.S)
    skills = [block for block in blocks if block.lstrip().startswith(("skill:", "# skills/"))]
    assert skills, "the README shows no skill file"
    path = tmp_path / "skill.yml"
    path.write_text(skills[0], encoding="utf-8")
    skill = read_skill_file(path)
    assert any(
        constraint.requires_confirmation and constraint.requires_confirmation.enabled
        for entry in skill.tool_constraints
        for constraint in entry.values()
    )


def test_the_readmes_links_into_the_docs_are_files() -> None:
    links = re.findall(r"\]\(((?:docs/)[^)#\s]+)", readme())
    assert links, "the README links to no docs page"
    missing = [link for link in links if not (REPO / link).is_file()]
    assert not missing, f"README.md links to files that are not there: {missing}"


def defined_names(module: Path) -> set[str]:
    """What a module defines at its top level, and for ``mcp_bridge`` the names it exports lazily."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets
            ):
                names |= {key.value for key in node.value.keys if isinstance(key, ast.Constant)}  # type: ignore[attr-defined]
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def missing_reference(dotted: str) -> bool:
    """``mcp_bridge.a.b.Name``: the longest prefix that is a module, then a name it defines."""
    parts = dotted.split(".")
    for length in range(len(parts), 0, -1):
        path = REPO.joinpath(*parts[:length])
        module = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
        if module.is_file():
            rest = parts[length:]
            return bool(rest) and rest[0] not in defined_names(module) and not (path / rest[0]).exists()
    return True


# A path in the repository (not part of a longer one), and a dotted name under mcp_bridge.
FOLDERS = "mcp_bridge|devstack|tests|scripts|examples|deploy|docs"
FILE = rf"(?<![\w/.-])((?:{FOLDERS})/[\w/.-]*\w\.(?:py|yml|md|txt|sh))"
DOTTED = r"(?<![\w/.-])(mcp_bridge(?:\.[A-Za-z_]\w*)+)"


def test_the_code_the_docs_name_is_there() -> None:
    """Every file of the repository and every ``mcp_bridge`` module or name a page mentions exists, so
    a page cannot go on naming a module after it moved (or a class that never existed)."""
    stale: list[str] = []
    for page in sorted([*DOCS.rglob("*.md"), REPO / "README.md"]):
        # The words table's "Not a name: ..." lists names that must not exist (tests/docs/test_words.py).
        text = re.sub(r"Not a name:[^|\n]*", "", page.read_text(encoding="utf-8"))
        where = page.relative_to(REPO)
        for path in set(re.findall(FILE, text)):
            if not (REPO / path).is_file():
                stale.append(f"{where}: {path}")
        for dotted in set(re.findall(DOTTED, text)):
            if not dotted.endswith((".yml", ".yaml")) and missing_reference(dotted):
                stale.append(f"{where}: {dotted}")
    assert not stale, "pages name code that is not there:\n" + "\n".join(sorted(stale))
