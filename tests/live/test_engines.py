"""PostgreSQL as root, with its folder somewhere the `postgres` user cannot reach (a checkout in a
home directory or in `mktemp -d`, mode 0700): the data goes to a private folder it can reach."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from devstack import engines

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another user")


def test_postgres_in_a_folder_only_root_can_enter() -> None:
    closed = Path(tempfile.mkdtemp(prefix="closed-"))  # mode 0700, owner root
    try:
        location = closed / "var" / "postgres"
        password = secrets.token_urlsafe(16)
        server = engines.Postgres(location, password, durable=False)
        with server.service():
            assert server.sql(["SELECT 1"]).strip() == "1"
            url = server.create_database("closed_check", "closed_owner", "it's-a-secret")
            assert url.endswith("/closed_check")
        assert location.is_symlink()
        data = server.data_dir
        private = data.parent
        assert private.name.startswith(engines.PRIVATE_PREFIX)
        assert private.parent == Path(tempfile.gettempdir())
        for folder in (private, data):
            info = folder.stat()
            assert folder.owner() == "postgres" and stat.S_IMODE(info.st_mode) == 0o700
        # No password file left behind, anywhere.
        assert not list(private.glob(".*.pw")) and not list(location.parent.glob(".*.pw"))
        # A second start finds the same data through the link.
        with engines.Postgres(location, password, durable=False).service():
            pass
        assert server.data_dir == data
        server.remove()
        assert not location.exists() and not location.is_symlink() and not private.exists()
    finally:
        engines.remove_postgres_data(closed / "var" / "postgres")
        shutil.rmtree(closed, ignore_errors=True)


def test_abandoned_private_folders_are_swept() -> None:
    """`rm -rf var` leaves a private folder nothing links to; the next new one removes it."""
    closed = Path(tempfile.mkdtemp(prefix="closed-"))
    try:
        first = engines.Postgres(closed / "a" / "postgres", "pw", durable=False)
        abandoned = first._place().parent
        (closed / "a" / "postgres").unlink()  # what `rm -rf var` does to the link
        kept = engines.Postgres(closed / "k" / "postgres", "pw", durable=False)
        kept_private = kept._place().parent
        second = engines.Postgres(closed / "b" / "postgres", "pw", durable=False)
        second._place()
        assert not abandoned.exists()
        assert kept_private.exists() and second.data_dir.exists()
        kept.remove()
        second.remove()
        assert not kept_private.exists()
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_a_reachable_folder_keeps_the_data_itself() -> None:
    folder = Path(tempfile.mkdtemp(prefix="open-"))
    folder.chmod(0o755)
    try:
        server = engines.Postgres(folder / "postgres", "pw", durable=False)
        server.init()
        assert not server.location.is_symlink() and (folder / "postgres" / "PG_VERSION").exists()
        assert not list(folder.glob(".*.pw"))
        server.remove()
        assert not (folder / "postgres").exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
