#!/usr/bin/env bash
# Builds, here where no container registry is reachable, a base image of the same shape as the
# official rasa/rasa-sdk:3.21.1 (Ubuntu 24.04, Python 3.12, rasa-sdk in /opt/venv, USER 1001,
# WORKDIR /app, EXPOSE 5055, entrypoint `python -m rasa_sdk`, CMD start --actions actions):
# Debian 12 from debootstrap, pyenv's Python 3.12 copied into /usr/local, rasa-sdk 3.21.1 in /opt/venv.
# It also fills var/container/wheels with every wheel deploy/Dockerfile installs, so the image
# builds offline (`podman build --volume var/container/wheels:/wheels`).
#
# Usage: scripts/container_base.sh   (as root; prints the base image's name on its last line)
# The image is cached in podman's store and as var/container/base-<digest>.tar (digest of this
# script and the pins it installs), so a second run only checks that it is there.
# Installs podman, runc and debootstrap (Debian packages) when missing, as install-services.sh does.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${CONTAINER_CACHE:-$ROOT/var/container}"
SDK_VERSION="3.21.1"
PYTHON_SRC="${CONTAINER_PYTHON:-$(ls -d "$(pyenv root 2>/dev/null || echo /root/.pyenv)"/versions/3.12* 2>/dev/null | tail -1)}"
# podman runs here only with runc, host networking and no default ulimits (no CAP_SYS_RESOURCE).
CONF="$CACHE/containers.conf"
PODMAN=(podman --runtime /usr/sbin/runc)
LIBRARIES=ca-certificates,libsqlite3-0,libssl3,libffi8,libbz2-1.0,liblzma5,libreadline8,libncursesw6,libuuid1,zlib1g,libgdbm6,libexpat1

log() { echo "container_base: $*" >&2; }
# Commands inside the root file system, with none of this machine's environment (its pip settings).
in_root() { chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root "$@"; }

if [ "$(id -u)" != 0 ]; then
    log "must run as root (debootstrap, chroot and podman's root store)"
    exit 2
fi
if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null || [ ! -x /usr/sbin/runc ]; then
    log "installing podman, runc and debootstrap"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc debootstrap >&2
fi
if [ -z "$PYTHON_SRC" ] || [ ! -x "$PYTHON_SRC/bin/python3.12" ]; then
    log "no Python 3.12 build found (set CONTAINER_PYTHON to a pyenv 3.12 prefix)"
    exit 2
fi

mkdir -p "$CACHE"
printf '[containers]\ndefault_ulimits = []\n' > "$CONF"
export CONTAINERS_CONF="$CONF"

# The wheels: rasa-sdk for the base; the plugin's and the example bot's dependencies, at the pins of
# constraints/venv.txt, for deploy/Dockerfile (the plugin with its postgres extra); setuptools to build the plugin from its source.
WHEELS="$CACHE/wheels"
PINS="$(cat "$ROOT/constraints/venv.txt" "$ROOT/pyproject.toml" "$0" | sha256sum | cut -c1-16)"
if [ ! -f "$WHEELS/.complete-$PINS" ]; then
    log "downloading wheels for Python 3.12 into $WHEELS"
    rm -rf "$WHEELS"
    mkdir -p "$WHEELS"
    "$ROOT/.venv/bin/python" -m pip download -q --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 --platform linux_x86_64 --platform any \
        -c "$ROOT/constraints/venv.txt" -d "$WHEELS" \
        "rasa-sdk==$SDK_VERSION" "$ROOT[postgres]" setuptools wheel > "$CACHE/pip-download.log" 2>&1 \
        || { tail -20 "$CACHE/pip-download.log" >&2; exit 1; }
    # The plugin itself is built in the image from its source, not taken from here.
    rm -f "$WHEELS"/rasa_mcp_bridge-*
    ls "$WHEELS"/rasa_sdk-"$SDK_VERSION"-*.whl >/dev/null
    touch "$WHEELS/.complete-$PINS"
fi

DIGEST="$(cat "$0" "$PYTHON_SRC/bin/python3.12" | sha256sum | cut -c1-12)"
IMAGE="localhost/mcp-bridge-sdk-base:$SDK_VERSION-$DIGEST"
TARBALL="$CACHE/base-$DIGEST.tar"

if "${PODMAN[@]}" image exists "$IMAGE"; then
    echo "$IMAGE"
    exit 0
fi

if [ ! -f "$TARBALL" ]; then
    ROOTFS="$CACHE/rootfs-$DIGEST"
    rm -rf "$ROOTFS"
    log "debootstrap bookworm into $ROOTFS (a few minutes)"
    # The libraries pyenv's Python links its modules against (ssl, sqlite3, ctypes, lzma, ...).
    debootstrap --variant=minbase --include="$LIBRARIES" bookworm "$ROOTFS" http://deb.debian.org/debian >&2
    # debootstrap can leave the root's /proc mounted; nothing of the host goes into the image.
    trap 'umount -R -l "$ROOTFS/proc" 2>/dev/null || true' EXIT
    umount -R -l "$ROOTFS/proc" 2>/dev/null || true
    log "Python 3.12 from $PYTHON_SRC into /usr/local"
    for part in bin lib include; do
        cp -a "$PYTHON_SRC/$part/." "$ROOTFS/usr/local/$part/"
    done
    # pyenv's build is linked against its own prefix; the copy finds libpython in /usr/local/lib.
    in_root /sbin/ldconfig
    rm -rf "$ROOTFS/tmp/wheels" && mkdir -p "$ROOTFS/tmp/wheels"
    cp "$WHEELS"/*.whl "$ROOTFS/tmp/wheels/"
    in_root /usr/local/bin/python3.12 -c "import ssl, sqlite3, ctypes, lzma, bz2, zlib, uuid"
    in_root /usr/local/bin/python3.12 -m venv /opt/venv
    in_root /opt/venv/bin/pip install -q --no-index --find-links /tmp/wheels "rasa-sdk==$SDK_VERSION" >&2
    rm -rf "$ROOTFS/tmp/wheels" "$ROOTFS/var/cache/apt/archives"/*.deb "$ROOTFS/var/lib/apt/lists"/*
    # The official image's entrypoint: `start` runs the action server, anything else is run as is.
    cat > "$ROOTFS/app-entrypoint.sh" <<'EOF'
#!/bin/bash
set -e
if [ "${1:-}" = "start" ]; then
    shift
    exec python -m rasa_sdk "$@"
fi
exec "$@"
EOF
    chmod 755 "$ROOTFS/app-entrypoint.sh"
    mkdir -p "$ROOTFS/app"
    in_root /usr/sbin/useradd --uid 1001 --gid 0 --no-create-home --home-dir /app --shell /bin/bash app
    chown 1001:0 "$ROOTFS/app"
    umount -R -l "$ROOTFS/proc" 2>/dev/null || true
    tar -C "$ROOTFS" --one-file-system -cf "$TARBALL.tmp" .
    find "$CACHE" -maxdepth 1 -name 'base-*.tar' -delete  # an older base's, replaced by this one
    mv "$TARBALL.tmp" "$TARBALL"
    rm -rf "$ROOTFS"
fi

log "importing $TARBALL as $IMAGE"
"${PODMAN[@]}" import \
    --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV PYTHONUNBUFFERED=1' \
    --change 'WORKDIR /app' \
    --change 'USER 1001' \
    --change 'EXPOSE 5055' \
    --change 'ENTRYPOINT ["/app-entrypoint.sh"]' \
    --change 'CMD ["start", "--actions", "actions"]' \
    "$TARBALL" "$IMAGE" >&2
echo "$IMAGE"
