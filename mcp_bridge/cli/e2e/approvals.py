"""The approval page as an approver uses it, for the ``approval`` step: log in, see, decide.

The runner drives the real page over HTTP, as a browser would: it logs in (the page's password form,
``POST /login``, or, when the page logs approvers in at an OpenID provider, through the provider's
login form and back to ``/callback``), reads ``GET /api/pending`` and decides with
``POST /api/decide``, sending the page's own ``Origin`` as its script does. Each approver has a
session (a cookie jar) of their own for the whole run.

Passwords come from the environment, ``APPROVER_<NAME>_PASSWORD`` (the name upper-cased), else from
the file ``approver_<name>_password`` in a folder (``make up`` writes them to ``var/``); never from
the command line or a case file. A provider's login form is read as plain HTML: the form with a
password field, its hidden fields kept, the first other text field given the user name; a login
that needs a script or a second factor cannot be driven (use a password login for tests).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp

from mcp_bridge.auth.browser import is_loopback

__all__ = ["ApprovalPage", "ApproverError", "PageAnswer", "password_for"]

# The reasons the page gives for a decision it refuses (mcp_bridge/approvals/page.py).
REFUSALS = frozenset({"own_request", "not_allowed", "unknown_person", "already_decided", "unknown"})
MAX_FORM_BYTES = 256 * 1024


class ApproverError(Exception):
    """An approver could not log in, or the page could not be reached as expected."""


def _variable(name: str) -> str:
    return "APPROVER_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_PASSWORD"


def password_for(name: str, folder: Path | None, env: Mapping[str, str]) -> str:
    """``name``'s password: ``APPROVER_<NAME>_PASSWORD`` in ``env`` (the environment), else
    ``<folder>/approver_<name>_password``."""
    variable = _variable(name)
    if env.get(variable):
        return env[variable]
    if folder is not None:
        path = folder / f"approver_{name}_password"
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            text = ""
        if text:
            return text
    where = f" or the file {folder / f'approver_{name}_password'}" if folder is not None else ""
    raise ApproverError(f"no password for the approver {name!r}: set {variable}{where}")


@dataclass(frozen=True)
class PageAnswer:
    """What the page answered to a decision: ``decided`` or the reason it refused."""

    kind: str
    status: int
    error: str | None = None

    def __str__(self) -> str:
        return self.kind if self.error is None else f"{self.kind} ({self.status}: {self.error})"


class _LoginForm(HTMLParser):
    """The first form holding a password field: its action and its fields."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, list[dict[str, str]]]] = []
        self._current: list[dict[str, str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {key: value or "" for key, value in attrs}
        if tag == "form":
            self._current = []
            self.forms.append((values.get("action", ""), self._current))
        elif tag == "input" and self._current is not None:
            self._current.append(values)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None

    def login(self, user: str, password: str) -> tuple[str, dict[str, str]] | None:
        for action, inputs in self.forms:
            if not any(field.get("type", "").lower() == "password" for field in inputs):
                continue
            data: dict[str, str] = {}
            user_given = False
            for field in inputs:
                name, kind = field.get("name", ""), field.get("type", "text").lower()
                if not name:
                    continue
                if kind == "password":
                    data[name] = password
                elif kind == "hidden":
                    data[name] = field.get("value", "")
                elif kind in ("text", "email", "") and not user_given:
                    data[name], user_given = user, True
            return (action, data) if user_given else None
        return None


class ApprovalPage:
    """The page at ``url``, with one logged-in session per approver (made on first use)."""

    def __init__(self, url: str, passwords: Mapping[str, str], timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self._passwords = dict(passwords)
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def _origin(self) -> dict[str, str]:
        # The page's script sends its own Origin on every POST; the page refuses any other.
        return {"Origin": self.url}

    async def _session(self, user: str) -> aiohttp.ClientSession:
        lock = self._locks.setdefault(user, asyncio.Lock())
        async with lock:
            if user not in self._sessions:
                # unsafe: keep cookies of an IP address host (127.0.0.1); the page's Secure session
                # cookie goes back to it over http on loopback: both as a browser does.
                secure = [self.url] if is_loopback(urlsplit(self.url).hostname or "") else None
                jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=secure)
                session = aiohttp.ClientSession(timeout=self._timeout, cookie_jar=jar)
                try:
                    await self._login(session, user)
                except BaseException:
                    await session.close()
                    raise
                self._sessions[user] = session
            return self._sessions[user]

    async def _login(self, session: aiohttp.ClientSession, user: str) -> None:
        if user not in self._passwords:
            raise ApproverError(f"no password for the approver {user!r}")
        password = self._passwords[user]
        async with session.get(f"{self.url}/api/me") as answer:
            how = (await answer.json(content_type=None) or {}).get("login") if answer.status == 401 else None
        if how == "oidc":
            await self._login_at_provider(session, user, password)
        else:
            body = {"user": user, "password": password}
            async with session.post(f"{self.url}/login", json=body, headers=self._origin) as answer:
                if answer.status != 200:
                    raise ApproverError(f"the approval page refused {user!r}'s login ({answer.status})")
        async with session.get(f"{self.url}/api/me") as answer:
            me = await answer.json(content_type=None) if answer.status == 200 else {}
        if (me or {}).get("user") != user:
            raise ApproverError(f"{user!r} is not logged in to the approval page after logging in")

    async def _login_at_provider(self, session: aiohttp.ClientSession, user: str, password: str) -> None:
        async with session.get(f"{self.url}/login/oidc") as answer:
            form_url, html = str(answer.url), await answer.content.read(MAX_FORM_BYTES)
        parser = _LoginForm()
        parser.feed(html.decode("utf-8", errors="replace"))
        filled = parser.login(user, password)
        if filled is None:
            raise ApproverError(f"no login form with a user name and password field at {form_url}")
        action, data = filled
        async with session.post(urljoin(form_url, action), data=data) as answer:
            if answer.status >= 400:
                raise ApproverError(f"the identity provider refused {user!r}'s login ({answer.status})")

    async def pending(self, user: str) -> list[dict[str, Any]]:
        """The requests waiting for ``user``'s roles, as the page lists them."""
        session = await self._session(user)
        async with session.get(f"{self.url}/api/pending") as answer:
            if answer.status != 200:
                raise ApproverError(f"the approval page answered {answer.status} to {user!r}'s list")
            body = await answer.json(content_type=None)
        return list((body or {}).get("pending") or [])

    async def decide(self, user: str, request_id: str, approve: bool) -> PageAnswer:
        session = await self._session(user)
        body = {"id": request_id, "approve": approve}
        async with session.post(f"{self.url}/api/decide", json=body, headers=self._origin) as answer:
            found = await answer.json(content_type=None) or {}
        if answer.status == 200 and found.get("decided") in ("approved", "refused"):
            return PageAnswer("decided", 200)
        reason = str(found.get("reason") or "")
        return PageAnswer(
            reason if reason in REFUSALS else "refused", answer.status, str(found.get("error") or "")
        )

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
