"""`make cluster-up` / `make cluster-down`: the example bot as a small production deployment, on
loopback, in the background (devstack/cluster.py says what runs and where its data and secrets go).

    python -m scripts.cluster up      # start everything, print what runs where, write urls.json
    python -m scripts.cluster down    # stop exactly what `up` started

`up` records each process in var/cluster/cluster.json (CLUSTER_VAR moves the folder); `down` stops
exactly those, and what each left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from devstack import services
from devstack.cluster import DEFAULT_VAR, SECRETS, Cluster

STATE = "cluster.json"


def up(var: Path) -> int:
    state = var / STATE
    if state.exists():
        running = json.loads(state.read_text())
        if any(_alive(int(info["pid"])) for info in running.values() if info.get("pid")):
            print(f"already running (see {state}); run `make cluster-down` first", file=sys.stderr)
            return 1
        state.unlink()
    try:
        cluster = Cluster(var, detached=True)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        cluster.start()
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    state.write_text(json.dumps(cluster.state(), indent=2))
    urls = var / "urls.json"
    urls.write_text(json.dumps(cluster.urls(), indent=2))
    print("\nrunning:")
    print(cluster.table())
    if cluster.person:
        print(
            "\nthe bridge acts as the person: the first note asks them to sign in "
            f"({', '.join(cluster.person.accounts)}, any password) and comes back to "
            f"{cluster.person.redirect_uri} (through nginx, any action server); their tokens are in "
            "PostgreSQL `mcp_tokens`, encrypted; `disconnect my CRM` forgets them"
        )
    print(f"\nURLs as JSON in {urls}; secrets in {var} (mode 0600); logs in {cluster.logs}")
    print(
        f"the REST channel needs Authorization: Bearer $(cat {var / SECRETS['rest_token'][1]}); "
        f"Rasa's HTTP API ?token=$(cat {var / SECRETS['rasa_auth_token'][1]}); stop with `make cluster-down`"
    )
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def down(var: Path) -> int:
    state = var / STATE
    if not state.exists():
        print("nothing to stop")
        return 0
    running = json.loads(state.read_text())
    for name, info in reversed(list(running.items())):
        pid = info.get("pid")
        if not pid or not _alive(int(pid)):
            continue
        left = services.descendants(int(pid))
        os.kill(int(pid), int(info.get("stop_signal", signal.SIGTERM)))
        for _ in range(100):
            if not _alive(int(pid)):
                break
            time.sleep(0.1)
        else:
            os.kill(int(pid), signal.SIGKILL)
        services.end_processes(left)
        print(f"stopped {name} (pid {pid})")
    state.unlink()
    (var / "urls.json").unlink(missing_ok=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument("--var", type=Path, default=DEFAULT_VAR, help="where data, logs and secrets go")
    args = parser.parse_args()
    return up(args.var) if args.command == "up" else down(args.var)


if __name__ == "__main__":
    sys.exit(main())
