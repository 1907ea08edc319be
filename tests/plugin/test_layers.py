"""The plugin's packages are layered: none imports one above it, read from the source with ``ast``.

The order, lowest first, is the one the architecture page shows. Imports under ``TYPE_CHECKING``
count too: a type from above is a dependency on it all the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mcp_bridge

# The package under test: the checkout's, or in `make package` the installed wheel's (its tree has no
# mcp_bridge/, so that the suite imports the wheel; the wheel ships every module's source).
PACKAGE = Path(mcp_bridge.__file__).resolve().parent
# The checkout (in `make package`, the tree the wheel was built from): its docs.
REPO = Path(__file__).resolve().parents[2]

# --8<-- [start:layers] (the architecture page, docs/contributing/architecture.md, shows these lines)
# Lowest first. The modules at the top of mcp_bridge/ (errors, contract, sealing, question, release_0_3,
# and mcp_sdk, the MCP SDK as every layer sees it) are below all.
LAYERS = [
    "config",
    "record",
    "observability",
    "auth",
    "tools",
    "server_questions",
    "mcp_client",
    "skills",
    "reading",
    "approvals",
    "confirmation",
    "channels",
    "action_server",
    "cli",
]
TOP_MODULES = {"errors", "contract", "sealing", "question", "release_0_3", "mcp_sdk"}
# The bot's one line (`import mcp_bridge.rasa`), above all: it serves the action server's library.
BOT_MODULE = "rasa"
# --8<-- [end:layers]


def rank(part: str) -> int:
    """A first component under mcp_bridge: a top module is rank 0, a package its place + 1, the bot's
    module above every package."""
    if part in TOP_MODULES:
        return 0
    if part == BOT_MODULE:
        return len(LAYERS) + 1
    assert part in LAYERS, f"mcp_bridge.{part} is neither a top module nor a package in LAYERS"
    return LAYERS.index(part) + 1


def imported(tree: ast.Module) -> set[str]:
    """The first component under mcp_bridge of every module this source imports."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "mcp_bridge":
                continue
            if len(parts) > 1:
                found.add(parts[1])
            else:  # from mcp_bridge import x: x is a top module or a package
                found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError("relative import: the layering is read from absolute ones")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "mcp_bridge" and len(parts) > 1:
                    found.add(parts[1])
    return found


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def test_every_module_is_in_a_layer() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert top == TOP_MODULES | {BOT_MODULE}, "a module at the top of mcp_bridge/ that is no foundation one"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS)


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_module_imports_a_package_above_its_own(path: Path) -> None:
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    above = {
        part
        for part in imported(ast.parse(path.read_text(), str(path)))
        if part != own and rank(part) > rank(own)
    }
    assert not above, f"{path.relative_to(PACKAGE)} ({own}) imports from above it: {sorted(above)}"


def test_the_mcp_client_imports_nothing_of_the_confirmation_layer() -> None:
    for path in (PACKAGE / "mcp_client").rglob("*.py"):
        reached = imported(ast.parse(path.read_text()))
        above = {"confirmation", "reading", "approvals", "skills", "action_server", BOT_MODULE}
        assert not reached & above, path.name


def test_rasa_sdk_is_imported_only_by_the_action_server_and_the_bots_line() -> None:
    """Everything else is plain data, tested without Rasa (and the channels run where it is absent)."""

    def imports_rasa_sdk(tree: ast.Module) -> bool:
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            if any(name.split(".")[0] == "rasa_sdk" for name in names):
                return True
        return False

    allowed = {"action_server", f"{BOT_MODULE}.py"}
    found = {
        path.relative_to(PACKAGE).as_posix()
        for path in modules()
        if path.relative_to(PACKAGE).parts[0] not in allowed and imports_rasa_sdk(ast.parse(path.read_text()))
    }
    assert not found, f"rasa_sdk outside mcp_bridge/action_server/ and mcp_bridge/rasa.py: {sorted(found)}"


def test_the_check_sees_an_upward_import() -> None:
    source = "from mcp_bridge.confirmation.executor import Executor\n"
    assert rank(max(imported(ast.parse(source)), key=rank)) > rank("mcp_client")


def test_the_public_api_is_complete_and_resolves() -> None:
    import mcp_bridge

    for name in mcp_bridge.__all__:
        assert getattr(mcp_bridge, name) is not None, name
    assert mcp_bridge.__version__
    documented = mcp_bridge.__doc__ or ""
    undocumented = [name for name in mcp_bridge.__all__ if f"`{name}`" not in documented]
    assert not undocumented, f"exports the package docstring does not name: {undocumented}"


def test_the_readers_answers_are_documented_where_they_are_not_at_the_top() -> None:
    """A bot's form reads the reader's answers from mcp_bridge.reading.answers, and the Python API page
    shows each of them there; the top of mcp_bridge keeps what every bot author uses."""
    import typing

    import mcp_bridge
    from mcp_bridge.reading.answers import Answer

    answers = {kind.__name__ for kind in typing.get_args(Answer)} | {"Answer", "NluOpinion"}
    assert not answers & set(mcp_bridge.__all__), "the reader's answers are back at the top of mcp_bridge"
    page = (REPO / "docs" / "reference" / "python-api.md").read_text(encoding="utf-8")
    undocumented = sorted(
        name for name in answers - {"Answer"} if f"::: mcp_bridge.reading.answers.{name}\n" not in page
    )
    assert not undocumented, f"answers the Python API page does not show: {undocumented}"


# Modules whose job is to export names defined elsewhere: the package's public names (imported on first
# use), the MCP SDK's names as every mcp release the plugin takes spells them, and the names a Rasa Pro
# bot's own actions import from mcp_bridge.rasa (docs/getting-started/rasa-pro.md).
EXPORTERS = {"__init__.py", "mcp_sdk.py", "rasa.py"}


def defined_and_imported(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names a module's top level defines, and those it imports."""
    defined: set[str] = set()
    imported_names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {target.id for target in targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            imported_names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return defined, imported_names


def test_a_name_has_one_home_and_is_imported_from_it() -> None:
    """No module imports a name only to export it again: its ``__all__`` lists what it defines, and
    nothing (the plugin, its tests, scripts, the example bot) imports a name from a module that
    imported it."""
    repo_files = [
        path
        for folder in ("mcp_bridge", "tests", "scripts", "devstack", "examples")
        for path in (REPO / folder).rglob("*.py")
        if "release_0_3" not in path.parts  # runs against release 0.3.0's own tree
    ]
    homes: dict[str, set[str]] = {}  # module -> names it imports and does not define
    for path in modules():
        relative = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text())
        defined, imported_names = defined_and_imported(tree)
        dotted = "mcp_bridge." + relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        if relative in EXPORTERS:
            continue
        homes[dotted] = imported_names - defined
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                listed = {element.value for element in node.value.elts}  # type: ignore[attr-defined]
                assert listed <= defined, f"{relative} exports what it imports: {sorted(listed - defined)}"
    wrong = [
        f"{path.relative_to(REPO)}: {alias.name} from {node.module}"
        for path in repo_files
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module in homes
        for alias in node.names
        if alias.name in homes[node.module]
    ]
    assert not wrong, "names imported from a module that only imported them:\n" + "\n".join(wrong)


def test_what_a_call_is_for_travels_in_its_context_not_in_context_variables() -> None:
    """Who a call is for, its conversation, key, slots and the answers it resumes with go down as an
    explicit CallContext (mcp_bridge/tools/context.py). Context variables remain only where the MCP SDK
    calls back into the bridge from inside a call (its HTTP transport, its elicitation callback), which
    no argument can reach."""
    allowed = {"mcp_client/transport.py", "server_questions/waiting_calls.py", "mcp_sdk.py"}
    found = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "ContextVar(" in path.read_text()
    }
    assert found <= allowed, sorted(found - allowed)
