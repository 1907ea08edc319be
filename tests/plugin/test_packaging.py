"""The ranges `pyproject.toml` declares are the ranges that are tested.

Each action-server environment pins exact versions (constraints/venv.txt: rasa-sdk 3.21 on Python
3.13; constraints/venv-sdk36.txt: rasa-sdk 3.6 on Python 3.10). A declared range must admit both
pins, and its floor must name the older one's release line: a floor below it would promise a version nothing
here runs. The Rasa environment's python-socketio must stay past CVE-2026-48804 (fixed in 5.16.2).

The package a user installs: the version is named once (`mcp_bridge.__version__`) and the guides,
the changelog and the wheel's metadata name the same; the licence is Apache-2.0; the sdist and the
wheel, built with `python -m build`, pass `twine check` and `check-wheel-contents`, and the wheel
ships every file of `mcp_bridge/` (the word files the runtime loads included) and nothing else.
`make package` runs this file again from a fresh venv that has the wheel installed without a
constraints file, with MCP_BRIDGE_DIST naming the distributions it built: there the tests read those
and check that the plugin imported is the installed wheel, not a checkout.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import mcp_bridge

REPO = Path(__file__).resolve().parents[2]
# The tested environments: both ends of the action server, and Rasa Pro 3.21's own (mcp 1.30).
ENDS = {"venv.txt": "3.13", "venv-sdk36.txt": "3.10", "venv-pro.txt": "3.12"}
# The two action-server environments, which install the dev extra (Rasa Pro's has only the test tools).
DEV_ENDS = ("venv.txt", "venv-sdk36.txt")


def pins(name: str) -> dict[str, Version]:
    pinned: dict[str, Version] = {}
    for line in (REPO / "constraints" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            package, version = line.split("==", 1)
            pinned[canonicalize_name(package.split("[")[0])] = Version(version.split(";")[0].strip())
    return pinned


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["postgres"]]]


def floor(requirement: Requirement) -> Version | None:
    floors = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return max(floors) if floors else None


@pytest.mark.parametrize("requirement", declared(), ids=lambda r: r.name)
def test_each_declared_range_admits_both_ends_and_its_floor_is_tested(requirement: Requirement) -> None:
    name = canonicalize_name(requirement.name)
    tested = []
    for constraints, python in ENDS.items():
        environment = {**default_environment(), "python_version": python}
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        version = pins(constraints).get(name)
        assert version is not None, f"{requirement.name} is declared but {constraints} does not pin it"
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{requirement.name} {requirement.specifier} refuses {version}, which {constraints} tests"
        )
        tested.append(version)
    assert tested, f"{requirement.name} applies to neither tested end"
    lowest, oldest = floor(requirement), min(tested)
    # The floor names the oldest tested release line: 3.6 for 3.6.2, 0.17 for 0.17.40.
    assert lowest is not None and lowest.release == oldest.release[: len(lowest.release)], (
        f"{requirement.name}: the floor is {lowest}, the oldest tested version is {oldest}"
    )


def test_the_rasa_environment_runs_a_python_socketio_past_the_memory_exhaustion_advisory() -> None:
    version = pins("venv-rasa.txt")[canonicalize_name("python-socketio")]
    assert version >= Version("5.16.2"), f"python-socketio {version} is affected by CVE-2026-48804"


def project_table() -> dict[str, object]:
    document = tomllib.loads((REPO / "pyproject.toml").read_text())
    table: dict[str, object] = document["project"]
    return table


def test_the_version_is_named_once_and_everything_that_names_it_agrees() -> None:
    document = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in document["project"] and "version" in document["project"]["dynamic"]
    assert document["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mcp_bridge.__version__"}
    version = mcp_bridge.__version__
    assert str(Version(version)) == version, f"{version} is not a normalised PEP 440 version"
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## (\S+)", changelog, flags=re.M)
    assert releases and releases[0] == version, (
        f"CHANGELOG.md's newest release is {releases[:1]}, not {version}"
    )
    named = {
        "docs/ADOPTING.md": re.findall(
            r"rasa_mcp_bridge-([^-\s]+)-py3-none-any\.whl", (REPO / "docs/ADOPTING.md").read_text()
        ),
        "docs/concepts/who-may-answer.md": re.findall(
            r"`rasa-mcp-bridge (\S+) requires", (REPO / "docs/concepts/who-may-answer.md").read_text()
        ),
    }
    for path, versions in named.items():
        assert versions and set(versions) == {version}, f"{path} names {sorted(set(versions))}, not {version}"


def test_the_licence_is_apache_2_and_the_classifiers_say_what_is_tested() -> None:
    project = project_table()
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    licence = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence
    classifiers = project["classifiers"]
    assert isinstance(classifiers, list)
    # An SPDX expression is the licence; a licence classifier beside it is refused by setuptools >= 77.
    assert not [c for c in classifiers if c.startswith("License ::")]
    admitted = SpecifierSet(str(project["requires-python"]))
    candidates = [f"3.{minor}" for minor in range(6, 20)]
    listed = sorted(
        (
            c.rsplit(" ", 1)[1]
            for c in classifiers
            if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
        ),
        key=Version,
    )
    assert listed == [v for v in candidates if admitted.contains(f"{v}.0")], (
        "Python classifiers != requires-python"
    )
    assert set(ENDS.values()) <= set(listed)
    if "Typing :: Typed" in classifiers:
        assert (REPO / "mcp_bridge" / "py.typed").exists() or not (REPO / "mcp_bridge").exists()


@pytest.mark.parametrize("tool", ["build", "twine", "check-wheel-contents", "setuptools"])
def test_the_build_tools_are_dev_dependencies_pinned_at_both_ends(tool: str) -> None:
    extras = project_table()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert tool in {canonicalize_name(Requirement(r).name) for r in extras["dev"]}, f"{tool} is not in [dev]"
    for constraints in DEV_ENDS:
        assert canonicalize_name(tool) in pins(constraints), f"{constraints} does not pin {tool}"


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


# The sdist's source: what a checkout's `python -m build` reads (tests/plugin/test_packaging.py builds
# a copy of it, so neither build/ nor the egg-info of the checkout is touched).
SOURCE = ["mcp_bridge", "pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dist]:
    """The sdist and the wheel: `make package`'s (MCP_BRIDGE_DIST), or built here from the checkout."""
    given = os.environ.get("MCP_BRIDGE_DIST")
    if given:
        out = Path(given)
    else:
        work = tmp_path_factory.mktemp("build")
        source, out = work / "source", work / "dist"
        source.mkdir()
        for name in SOURCE:
            if (REPO / name).is_dir():
                shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(REPO / name, source / name)
        # --no-isolation: the setuptools this environment pins, nothing downloaded; the wheel is built
        # from the sdist, so a file the sdist leaves out is missing from the wheel too.
        built = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = out.glob("rasa_mcp_bridge-*.whl")
    (sdist,) = out.glob("rasa_mcp_bridge-*.tar.gz")
    yield Dist(wheel, sdist)


def tool_command(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def test_twine_and_check_wheel_contents_pass(dist: Dist) -> None:
    twine = subprocess.run(
        [*tool_command("twine"), "check", "--strict", str(dist.wheel), str(dist.sdist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert twine.returncode == 0, twine.stdout + twine.stderr
    contents = subprocess.run(
        [*tool_command("check_wheel_contents"), str(dist.wheel)], capture_output=True, text=True, timeout=120
    )
    assert contents.returncode == 0, contents.stdout + contents.stderr


def wheel_metadata(dist: Dist) -> email.message.Message:
    with zipfile.ZipFile(dist.wheel) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(wheel.read(name).decode("utf-8"))


def test_the_wheels_metadata_is_complete(dist: Dist) -> None:
    metadata = wheel_metadata(dist)
    project = project_table()
    assert metadata["Name"] == "rasa-mcp-bridge"
    assert metadata["Version"] == mcp_bridge.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Requires-Python"] == str(SpecifierSet(str(project["requires-python"])))
    assert metadata["Description-Content-Type"] == "text/markdown"
    # The long description is the README, as PyPI shows it.
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert metadata.get_payload().strip() == readme.strip()
    assert metadata.get_all("Classifier") == project["classifiers"]
    assert metadata["Summary"] == project["description"]
    dependencies = project["dependencies"]
    assert isinstance(dependencies, list)
    required = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    assert {str(r) for r in required if r.marker is None or "extra" not in str(r.marker)} == {
        str(Requirement(d)) for d in dependencies
    }
    extras = {"postgres", "example", "dev", "docs", "approval-page"}
    assert set(metadata.get_all("Provides-Extra") or []) == extras


def test_the_wheel_ships_mcp_bridge_with_its_data_files_and_nothing_else(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = wheel.namelist()
    info = f"rasa_mcp_bridge-{mcp_bridge.__version__}.dist-info"
    assert {n.split("/", 1)[0] for n in names} == {"mcp_bridge", info}, (
        "the wheel ships more than mcp_bridge/"
    )
    assert f"{info}/licenses/LICENSE" in names
    shipped = {n for n in names if n.startswith("mcp_bridge/")}
    assert not [n for n in shipped if "__pycache__" in n or n.endswith(".pyc")]
    # What the runtime loads beside the code: the word files, init's fragments, the type marker.
    for data in [
        "reading/confirmation_words.yml",
        "approvals/lookalikes.yml",
        "py.typed",
        "cli/bot/domain.yml",
        "cli/bot/skill.yml",
    ]:
        assert f"mcp_bridge/{data}" in shipped, f"the wheel lacks mcp_bridge/{data}"
    with tarfile.open(dist.sdist) as sdist:
        members = sdist.getnames()
    root = f"rasa_mcp_bridge-{mcp_bridge.__version__}"
    in_sdist = {m.removeprefix(root + "/") for m in members if sdist_file(members, m)}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "PKG-INFO"} <= in_sdist
    outside = {"tests", "examples", "devstack", "scripts", "docs"}
    assert not [m for m in in_sdist if m.split("/", 1)[0] in outside]
    assert shipped == {m for m in in_sdist if m.startswith("mcp_bridge/")}, "the sdist and the wheel differ"
    package = REPO / "mcp_bridge"
    if package.is_dir():  # a checkout: every file of the package, whatever its kind, is in the wheel
        files = {
            p.relative_to(REPO).as_posix()
            for p in package.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        }
        assert files - shipped == set(), "files of mcp_bridge/ the wheel does not ship"


def sdist_file(members: list[str], member: str) -> bool:
    return not any(other.startswith(member + "/") for other in members)


@pytest.mark.skipif(not os.environ.get("MCP_BRIDGE_DIST"), reason="only in `make package`'s fresh venv")
def test_the_plugin_under_test_is_the_installed_wheel(dist: Dist) -> None:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    imported = Path(mcp_bridge.__file__).resolve()
    assert imported.is_relative_to(site), f"mcp_bridge was imported from {imported}, not the wheel in {site}"
    assert not (REPO / "mcp_bridge").exists(), "the suite runs from a copy that holds the checkout's package"
    distribution = importlib.metadata.distribution("rasa-mcp-bridge")
    assert distribution.version == mcp_bridge.__version__ == wheel_metadata(dist)["Version"]
    assert "mcp_bridge/__init__.py" in {str(f) for f in distribution.files or []}
    assert (resources.files("mcp_bridge.approvals") / "lookalikes.yml").is_file()
    assert not (Path(distribution.locate_file("")) / "tests").exists(), "tests/ was installed"
