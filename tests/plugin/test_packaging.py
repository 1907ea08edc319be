"""The ranges `pyproject.toml` declares are the ranges that are tested.

Each action-server environment pins exact versions (constraints/venv.txt: rasa-sdk 3.21 on Python
3.13; constraints/venv-sdk36.txt: rasa-sdk 3.6 on Python 3.10). A declared range must admit both
pins, and its floor must name the older one's release line: a floor below it would promise a version nothing
here runs. The Rasa environment's python-socketio must stay past CVE-2026-48804 (fixed in 5.16.2).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
ENDS = {"venv.txt": "3.13", "venv-sdk36.txt": "3.10"}


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
