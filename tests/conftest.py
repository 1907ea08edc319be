"""Shared fixtures: real CRM processes on free local ports, stopped after use.

Session-scoped services (`crm_db`, `crm_rest`, `crm_mcp`) are shared to keep the suite fast,
so tests using them must reason in deltas (notes they added, sessions they opened), never in
absolute counts. A test that needs a process of its own uses `services` and a fresh database.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from devstack.services import crm_api_token
from tests.support import procs

# The CRM REST API's token, as every service the tests start gets it: the local tools that run in
# this process (crm.tools) read it from the environment, like the action server's.
os.environ["CRM_API_TOKEN"] = crm_api_token()


@pytest.fixture(scope="session")
def crm_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seeded CRM database shared by the whole session."""
    return procs.seed_db(tmp_path_factory.mktemp("crm") / "crm.sqlite3")


@pytest.fixture
def fresh_crm_db(tmp_path: Path) -> Path:
    """A seeded CRM database of this test's own."""
    return procs.seed_db(tmp_path / "crm.sqlite3")


@pytest.fixture(scope="session")
def crm_rest(crm_db: Path) -> Iterator[str]:
    """Base URL of a `python -m crm rest` over `crm_db`."""
    with procs.crm_rest(crm_db) as service:
        yield service.url


@pytest.fixture(scope="session")
def crm_mcp(crm_rest: str) -> Iterator[str]:
    """URL (ending in /mcp) of a `python -m crm mcp` without a token, calling `crm_rest`."""
    with procs.crm_mcp(crm_rest) as service:
        yield service.url


@pytest.fixture
def services() -> Iterator[procs.Services]:
    """Start extra processes with `services.start(procs.crm_mcp(...))`; all stop after the test."""
    started = procs.Services()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
async def crm_tools(crm_rest: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ModuleType]:
    """`crm.tools`, configured to call `crm_rest`; its HTTP session is closed afterwards."""
    from crm import tools

    monkeypatch.setenv("CRM_URL", crm_rest)
    try:
        yield tools
    finally:
        await tools.close_client()
