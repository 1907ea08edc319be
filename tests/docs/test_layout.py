"""The layout page (docs/contributing/layout.md) is true: every folder of the repository and of tests/
is on it, the plugin's tests are laid out like the plugin, and the process library and the commands
never import the tests."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "contributing" / "layout.md"


def tracked_folders(under: str = "") -> set[str]:
    """The folders directly under ``under`` (the top when empty) that hold a tracked file."""
    files = subprocess.run(
        ["git", "ls-files", "--", under or "."], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    depth = under.count("/") + 1 if under else 0
    return {
        "/".join(parts[: depth + 1])
        for parts in (file.split("/") for file in files)
        if len(parts) > depth + 1 and not parts[depth].startswith(".")
    }


def test_every_folder_of_the_repository_and_of_tests_is_on_the_layout_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    folders = tracked_folders() | tracked_folders("tests")
    # Named as `folder/`, or by a path in it (`examples/crm_bot/`).
    assert sorted(f for f in folders if f"`{f}/" not in page) == [], "folders the layout page does not name"


def test_the_plugins_tests_are_laid_out_like_the_plugin() -> None:
    """Each folder of tests/plugin/ is a package of mcp_bridge/ of the same path, and is a package
    itself (so two test modules of one name in two folders do not clash)."""
    tests = REPO / "tests" / "plugin"
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        relative = folder.relative_to(tests)
        assert (REPO / "mcp_bridge" / relative / "__init__.py").is_file(), (
            f"tests/plugin/{relative.as_posix()}/ has no package mcp_bridge/{relative.as_posix()}/ to mirror"
        )
        assert (folder / "__init__.py").is_file(), f"tests/plugin/{relative.as_posix()}/ is not a package"


def imported(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_process_library_and_the_commands_never_import_the_tests() -> None:
    wrong = [
        f"{path.relative_to(REPO)} imports {name}"
        for folder, refused in (("devstack", {"tests", "scripts"}), ("scripts", {"tests"}))
        for path in sorted((REPO / folder).rglob("*.py"))
        for name in sorted(imported(path) & refused)
    ]
    assert wrong == []
