#!/usr/bin/env bash
# Installs the Debian packages the cluster runs on: PostgreSQL (Rasa's tracker store, the CRM
# store), Redis (Rasa's lock store) and nginx (the load balancer). Nothing is started or enabled
# here: devstack/engines.py starts each on loopback, for the cluster (its data under var/cluster/) and
# for the tests (their data in temporary folders).
# Skips everything when the programs are already there; otherwise needs root (CI runs as root).
# Waits up to 15 minutes for another apt-get to release the dpkg lock.
set -euo pipefail

missing=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "error: the cluster needs ${missing[*]}; install them as root: apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "==> installing ${missing[*]} (Debian packages)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q -o DPkg::Lock::Timeout=900
# policy-rc.d keeps the packages' own services from starting: the cluster starts its own copies.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    created_policy=1
fi
trap '[ $created_policy -eq 1 ] && rm -f "$policy"' EXIT
apt-get install -y -q -o DPkg::Lock::Timeout=900 --no-install-recommends "${missing[@]}"
