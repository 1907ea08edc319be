"""The ends of the supported range that `make bench` measures side by side, and their workers.

An end is an action-server environment: its Python and its rasa-sdk (with the Sanic, mcp and
uvloop that come with them). By default the repository's two: `.venv` (the newest end, the
repository's own) and `.venv-sdk36` (the oldest supported). The action servers of sections 4 to 7
run on each end's interpreter; sections 1 to 3 run in a worker process of each
(tests/bench/worker.py), and the samples of the ends are interleaved round by round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.stats import Series, round_robin_order
from tests.support import procs

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VENVS = (".venv", ".venv-sdk36")
PACKAGES = ("rasa-sdk", "sanic", "mcp", "uvloop", "aiohttp", "pydantic")
_PROBE = """
import json, platform, sys
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
names = json.loads(sys.argv[1])
print(json.dumps({"python": platform.python_version(), "packages": {p: version(p) for p in names}}))
"""


@dataclass(frozen=True)
class End:
    python: str  # the interpreter, as given (a venv's bin/python): not resolved, so the venv counts
    venv: str  # where it lives, relative to the repository when inside it
    python_version: str
    versions: dict[str, str | None] = field(default_factory=dict)

    @property
    def sdk(self) -> str:
        return self.versions.get("rasa-sdk") or "?"

    @property
    def key(self) -> str:
        """The column's name: rasa-sdk and Python."""
        return f"rasa-sdk {self.sdk} / Python {self.python_version}"

    @property
    def short(self) -> str:
        """For a column's head: rasa-sdk and Python's major.minor."""
        return f"sdk {self.sdk} / Py {'.'.join(self.python_version.split('.')[:2])}"

    def describe(self) -> str:
        others = ", ".join(f"{name} {self.versions.get(name) or '-'}" for name in PACKAGES[1:])
        return f"{self.key} ({self.venv}: {others})"

    def summary(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "python": self.python,
            "venv": self.venv,
            "python_version": self.python_version,
            **self.versions,
        }


def probe(python: str | Path) -> End:
    """The versions an interpreter has; a clear error when it is missing or has no rasa-sdk."""
    path = Path(python)
    if not path.exists():
        raise SystemExit(f"error: {path} does not exist")
    result = subprocess.run(
        [str(path), "-c", _PROBE, json.dumps(PACKAGES)], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        raise SystemExit(f"error: {path} did not answer: {result.stderr.strip()}")
    found = json.loads(result.stdout)
    if not found["packages"].get("rasa-sdk"):
        raise SystemExit(f"error: {path} has no rasa-sdk: it is not an action-server environment")
    absolute = path.absolute()
    venv = absolute.parent.parent
    where = str(venv.relative_to(REPO)) if venv.is_relative_to(REPO) else str(venv)
    return End(str(absolute), where, found["python"], found["packages"])


def default_ends() -> list[End]:
    """The repository's two action-server venvs, newest end first."""
    missing = [venv for venv in DEFAULT_VENVS if not (REPO / venv / "bin" / "python").exists()]
    if missing:
        targets = " ".join(f"{venv}/.installed" for venv in missing)
        raise SystemExit(
            f"error: {', '.join(missing)} missing: run `make {targets}` (or `make setup`), "
            "or pick the ends with --python"
        )
    return [probe(REPO / venv / "bin" / "python") for venv in DEFAULT_VENVS]


def choose(pythons: list[Path] | None, this_end_only: bool) -> list[End]:
    if this_end_only:
        ends = [probe(sys.executable)]
    elif pythons:
        ends = [probe(python) for python in pythons]
    else:
        ends = default_ends()
    keys = [end.key for end in ends]
    if len(set(keys)) != len(keys):
        raise SystemExit(f"error: two ends with the same rasa-sdk and Python: {keys}")
    return ends


class Worker:
    """tests/bench/worker.py in one end's interpreter; its standard error goes to a file."""

    def __init__(self, end: End, env: dict[str, str]) -> None:
        self.end = end
        fd, name = tempfile.mkstemp(prefix="bench-worker-", suffix=".log")
        self.log = Path(name)
        with os.fdopen(fd, "wb") as log:
            self.process = subprocess.Popen(
                [end.python, "-m", "tests.bench.worker"],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise RuntimeError(f"the bench worker of {self.end.key} ended:\n{self._log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the bench worker of {self.end.key} failed:\n{answer['error']}")
        return answer

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def open(self, section: str, **args: Any) -> list[str]:
        return list(self._ask({"op": "open", "section": section, "args": args})["variants"])

    def run(self, variants: list[str]) -> list[float]:
        return [float(s) for s in self._ask({"op": "run", "variants": variants})["seconds"]]

    def close_section(self) -> None:
        self._ask({"op": "close"})

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.unlink(missing_ok=True)


def workers(ends: list[End], crm_url: str) -> dict[str, Worker]:
    env = procs.child_env({"CRM_URL": crm_url})  # the local tool functions of sections 1 and 3
    return {end.key: Worker(end, env) for end in ends}


def interleaved(
    running: dict[str, Worker],
    section: str,
    args: dict[str, dict[str, Any]],
    n: int,
    warmup: int,
) -> dict[str, dict[str, Series]]:
    """One in-process section at every end: `n` timed calls of each variant after `warmup` untimed
    ones. Each round runs every variant once in one end (in turn, the first one moving on each
    round, as `round_robin` does in one process), then in the next end; the ends' order flips
    every round. Returns end -> variant -> series."""
    keys = list(running)
    names: list[str] = []
    try:
        for key in keys:
            offered = running[key].open(section, **args[key])
            if names and offered != names:
                raise RuntimeError(f"{section}: the ends offer different variants: {names} vs {offered}")
            names = offered
        for key in keys:
            running[key].run([name for name in names for _ in range(warmup)])
        series = {key: {name: Series(name) for name in names} for key in keys}
        for i, round_names in enumerate(round_robin_order(names, dict.fromkeys(names, n))):
            for key in keys if i % 2 == 0 else keys[::-1]:
                for name, seconds in zip(round_names, running[key].run(round_names), strict=True):
                    series[key][name].samples.append(seconds)
        return series
    finally:
        for key in keys:
            if running[key].process.poll() is None:
                running[key].close_section()
