"""The action server as a container image (deploy/Dockerfile), built and run here with podman.

No registry is reachable here, so scripts/container_base.sh builds a base of the official
rasa/rasa-sdk:3.21.1 image's shape (Python 3.12, rasa-sdk in /opt/venv, USER 1001, its entrypoint)
and the Dockerfile is built on it, offline, from the wheels that script downloaded. The container
runs on the host's network, bound to 0.0.0.0 with a token; a real Rasa server (the example model,
a free port) calls it, with a real CRM and its MCP server. Every secret reaches the container as
`--env NAME` (the value from podman's own environment), never on a command line or in the image.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_bridge.cli.e2e.cases import load_paths
from mcp_bridge.cli.e2e.report import text_report
from mcp_bridge.cli.e2e.runner import Target, run_cases
from tests.support import procs
from tests.support.crm_db import count_notes
from tests.support.logged_stack import LoggedStack

pytestmark = pytest.mark.timeout(1800)

# Minutes from a cold cache and root's podman store: run by `make container-test`, not by `make pytest`.
if not os.environ.get("MCP_BRIDGE_CONTAINER_TEST"):
    pytest.skip("the container test runs in `make container-test`", allow_module_level=True)

CACHE = procs.REPO_ROOT / "var" / "container"
IMAGE = "localhost/crm-bot-actions:test"
RUNC = "/usr/sbin/runc"
CASES = procs.EXAMPLE_BOT / "tests" / "e2e" / "cases" / "confirm_deny.yml"
# The first two cases of confirm_deny.yml: a yes that writes, a no that writes nothing.
CONFIRM, DENY = "user confirms the note", "user denies the note"
CONFIRMATION_SECRET = "test-only container confirmation secret: 5d1e9a7c"


def podman_env() -> dict[str, str]:
    return procs.child_env({"CONTAINERS_CONF": str(CACHE / "containers.conf")})


def podman(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", "--runtime", RUNC, *args],
        env=env or podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def image() -> str:
    """The Dockerfile built on the base of the official image's shape; its build time is printed."""
    if os.geteuid() != 0:
        pytest.fail("the container test builds its base with debootstrap and chroot, as root")
    started = time.monotonic()
    base = subprocess.run(
        [str(procs.REPO_ROOT / "scripts" / "container_base.sh")],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert base.returncode == 0, base.stderr[-4000:]
    base_image = base.stdout.strip().splitlines()[-1]
    built = podman(
        "build",
        "--network",
        "host",
        "--file",
        str(procs.REPO_ROOT / "deploy" / "Dockerfile"),
        "--build-arg",
        f"BASE_IMAGE={base_image}",
        "--build-arg",
        "PIP_OPTIONS=--no-index --find-links /wheels",
        "--volume",
        f"{CACHE / 'wheels'}:/wheels:ro",
        "--tag",
        IMAGE,
        str(procs.REPO_ROOT),
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    print(f"\ncontainer image {IMAGE} on {base_image}: {time.monotonic() - started:.0f} s")
    return IMAGE


def container(
    image: str, name: str, port: int, env: dict[str, str], var: Path, *, volume: Path | None = None
) -> procs.ServiceProcess:
    """A (not yet started) `podman run` of ``image`` on the host's network; `.url` is its /webhook.
    The values of ``env`` are in podman's environment only; its arguments name the variables. It runs
    as deploy/helm/values.yaml runs it: a read-only root filesystem with /tmp and /app/var writable
    (tmpfs, as the chart's emptyDirs), no capabilities, no privilege escalation."""
    args = ["podman", "--runtime", RUNC, "run", "--rm", "--name", name, "--network", "host", *CONFINED]
    args += [arg for variable in env for arg in ("--env", variable)]
    args += ["--volume", f"{var}:/app/var"]
    if volume is not None:
        args += ["--volume", f"{volume}:{volume}"]
    base = f"http://{procs.HOST}:{port}"
    return procs.ServiceProcess(
        "action-server-container",
        [*args, image, *command(port)],
        env={**podman_env(), **env},
        ready_url=f"{base}/health",
        url=f"{base}/webhook",
        start_timeout=120.0,
    )


# The chart's securityContext, as podman's options (--read-only-tmpfs=false: only what is listed is
# writable). The app's var/, the chart's other emptyDir, is a directory of the test's, owned by the image's
# user (this podman gives a tmpfs there to root, whatever its mode option says).
CONFINED = [
    "--read-only",
    "--read-only-tmpfs=false",
    "--tmpfs",
    "/tmp",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
]


def command(port: int) -> list[str]:
    """The image's own command on another port (the host's network is shared with other tests)."""
    return ["start", "--actions", "actions", "--port", str(port)]


def remove(name: str) -> None:
    """The container, if podman left it behind (a SIGKILLed `podman run` does)."""
    podman("rm", "--force", "--ignore", name, timeout=60)


class ContainerStack(LoggedStack):
    """The CRM, its MCP server (static token), Rasa on a free port whose action endpoint is the
    container's, with its token in a header, and the container."""

    def __init__(self, workdir: Path, image: str) -> None:
        super().__init__(workdir)
        self.image = image
        self.db = workdir / "crm.sqlite3"
        self.port = procs.free_port()
        self.token = secrets.token_urlsafe(32)
        self.mcp_token = secrets.token_urlsafe(24)
        self.name = f"mcp-bridge-test-{self.port}"
        # The container's user (1001) writes the audit trail here, at the same path as on the host.
        self.shared = workdir / "shared"
        self.audit_log = self.shared / "audit.jsonl"
        # Mounted at the app's var/, as the chart's emptyDir is.
        self.var = workdir / "app-var"
        self.actions: procs.ServiceProcess | None = None

    def start(self) -> None:
        endpoints = procs.write_endpoints(
            self.workdir / "endpoints.yml", f"http://{procs.HOST}:{self.port}/webhook", self.token
        )
        self.start_rasa_in_background(endpoints)
        procs.seed_db(self.db)
        crm = self.start_logged(procs.crm_rest(self.db))
        mcp = self.start_logged(procs.crm_mcp(crm.url, token=self.mcp_token))
        for writable in (self.shared, self.var):
            writable.mkdir(parents=True, exist_ok=True)
            shutil.chown(writable, user=1001, group=0)
        env = {
            "CRM_URL": crm.url,
            "CRM_MCP_URL": mcp.url,
            "CRM_MCP_TOKEN": self.mcp_token,
            "CONFIRMATION_SECRET": CONFIRMATION_SECRET,
            "ACTION_SERVER_TOKEN": self.token,
            "MCP_BRIDGE_CHANNEL_KEY": self.access.channel_key,
            "AUDIT_LOG": str(self.audit_log),
            "APPROVALS_DATABASE": str(self.shared / "approvals.sqlite3"),
        }
        self.actions = self.start_logged(
            container(self.image, self.name, self.port, env, self.var, volume=self.shared)
        )

    def close(self) -> None:
        try:
            super().close()
        finally:
            remove(self.name)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[ContainerStack]:
    stack = ContainerStack(tmp_path_factory.mktemp("container"), image)
    try:
        stack.start()
        stack.wait_for_rasa()
        yield stack
    finally:
        stack.close()


def test_the_container_answers_health_without_a_token_and_runs_as_user_1001(stack: ContainerStack) -> None:
    with urllib.request.urlopen(f"http://{procs.HOST}:{stack.port}/health", timeout=10) as response:
        assert response.status == 200
    inspected = podman("inspect", "--format", "{{.Config.User}}", stack.name, timeout=60)
    assert inspected.stdout.strip() == "1001", inspected.stderr
    # Confined as the Helm chart confines it (and still answering, and writing, below): no capability in
    # its bounding set, no privilege to gain, and a root filesystem it cannot write.
    probe = (
        "import pathlib; status = open('/proc/self/status').read().splitlines(); "
        "print(*[line for line in status if line.startswith(('CapBnd', 'NoNewPrivs'))], sep='\\n'); "
        "pathlib.Path('/tmp/x').write_text('x'); pathlib.Path('/app/var/x').write_text('x'); "
        "pathlib.Path('/app/x').write_text('x')"
    )
    confined = podman("exec", stack.name, "python", "-c", probe, timeout=60)
    assert confined.returncode != 0 and "Read-only file system: '/app/x'" in confined.stderr, confined.stderr
    assert "CapBnd:\t0000000000000000" in confined.stdout, confined.stdout  # not even one to gain
    assert "NoNewPrivs:\t1" in confined.stdout, confined.stdout
    # No secret in the image or on podman's command line: only in the container's environment.
    history = podman("image", "inspect", stack.image, timeout=60).stdout
    assert stack.token not in history and CONFIRMATION_SECRET not in history
    assert stack.actions is not None
    assert not [arg for arg in stack.actions.args if stack.token in arg or stack.mcp_token in arg]


def test_a_yes_through_rasa_writes_once_and_a_no_writes_nothing(stack: ContainerStack) -> None:
    cases = {case.name: case for case in load_paths([CASES])}
    target = Target(
        rasa_url=stack.wait_for_rasa(),
        rasa_token=stack.access.api_token,
        rest_token=stack.access.rest_token,
        audit_log=stack.audit_log,
        timeout=90.0,
    )
    before = count_notes(stack.db)
    (confirmed,) = asyncio.run(run_cases([cases[CONFIRM]], target, concurrency=1))
    assert confirmed.passed, text_report([confirmed])
    assert count_notes(stack.db) == before + 1
    (denied,) = asyncio.run(run_cases([cases[DENY]], target, concurrency=1))
    assert denied.passed, text_report([denied])
    assert count_notes(stack.db) == before + 1
    # Rasa reached the container with its token: the audit trail was written inside it.
    assert stack.audit_log.stat().st_uid == 1001


def test_the_container_refuses_to_start_on_every_address_without_a_token(image: str) -> None:
    port = procs.free_port()
    name = f"mcp-bridge-test-{port}"
    env = {
        "CRM_MCP_TOKEN": secrets.token_urlsafe(24),
        "CONFIRMATION_SECRET": CONFIRMATION_SECRET,
        "MCP_BRIDGE_CHANNEL_KEY": procs.TEST_CHANNEL_KEY,
    }
    run = ["run", "--rm", "--name", name, "--network", "host"]
    run += [arg for variable in env for arg in ("--env", variable)]
    try:
        result = podman(*run, image, *command(port), timeout=180, env={**podman_env(), **env})
    finally:
        remove(name)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert "ACTION_SERVER_HOST=0.0.0.0" in output and "ACTION_SERVER_TOKEN is not set" in output
    assert CONFIRMATION_SECRET not in output
