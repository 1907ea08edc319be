"""How many password checks the approval page runs: two at a time, and none for a guesser.

Each ``POST /login`` costs a scrypt check (about 32 MB and 50 ms, the same for a user who does not
exist), so a client that sends logins fast could hold the page's memory and CPU, and guess passwords.
So at most :data:`CONCURRENT` checks run at once and at most :data:`WAITING` more wait for their turn
(:meth:`LoginLimit.checking`; beyond, refused unchecked): the memory checks take stays bounded
whatever arrives. And before any check, :meth:`LoginLimit.admit` looks at the failed logins of the
client (its address) and of the user name in the last :data:`WINDOW_SECONDS`: from :data:`PER_CLIENT`
/ :data:`PER_USER` of them on, the login is refused unchecked (HTTP 429, with ``Retry-After``), the
right password too. A login that succeeds counts for nothing. The counts are this process's (one
page replica); the table of them is bounded too (:data:`MAX_TRACKED`; full, a login from a new
client or for a new name waits for the window like one over the limit).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

__all__ = ["CONCURRENT", "PER_CLIENT", "PER_USER", "WINDOW_SECONDS", "LoginLimit", "TooMany"]

PER_CLIENT = 10
PER_USER = 10
WINDOW_SECONDS = 300.0
CONCURRENT = 2
WAITING = 8
MAX_TRACKED = 10_000


class TooMany(Exception):
    """Refused unchecked; try again after ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many logins; try again in {retry_after:.0f} s")
        self.retry_after = retry_after


class LoginLimit:
    """The recent failed logins, and the slots password checks run in."""

    def __init__(
        self,
        *,
        per_client: int = PER_CLIENT,
        per_user: int = PER_USER,
        window: float = WINDOW_SECONDS,
        concurrent: int = CONCURRENT,
        waiting: int = WAITING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client = per_client
        self.per_user = per_user
        self.window = window
        self._attempts: dict[str, deque[float]] = {}
        self._slots = asyncio.Semaphore(concurrent)
        self._room = concurrent + waiting
        self._inside = 0
        self._clock = clock

    def _recent(self, key: str, now: float) -> deque[float] | None:
        """The attempts under ``key`` in the window (None when the table is full and ``key`` new)."""
        kept = self._attempts.get(key)
        if kept is None:
            if len(self._attempts) >= MAX_TRACKED:
                self._forget_old(now)
            if len(self._attempts) >= MAX_TRACKED:
                return None
            kept = self._attempts[key] = deque()
        while kept and kept[0] <= now - self.window:
            kept.popleft()
        return kept

    def _forget_old(self, now: float) -> None:
        for key in [k for k, times in self._attempts.items() if not times or times[-1] <= now - self.window]:
            del self._attempts[key]

    def _keys(self, client: str, user: str) -> tuple[tuple[str, int], tuple[str, int]]:
        return (f"client:{client}", self.per_client), (f"user:{user}", self.per_user)

    def admit(self, client: str, user: str) -> None:
        """TooMany when ``client``, or anyone for ``user``, failed too often of late."""
        now = self._clock()
        for key, limit in self._keys(client, user):
            recent = self._recent(key, now)
            if recent is None:
                raise TooMany(self.window)
            if len(recent) >= limit:
                raise TooMany(max(1.0, recent[0] + self.window - now))

    def failed(self, client: str, user: str) -> None:
        """Count a failed login of ``client`` for ``user``."""
        now = self._clock()
        for key, _ in self._keys(client, user):
            recent = self._recent(key, now)
            if recent is not None:
                recent.append(now)

    @asynccontextmanager
    async def checking(self) -> AsyncIterator[None]:
        """A slot to run one password check in; TooMany when too many already wait for one."""
        if self._inside >= self._room:
            raise TooMany(1.0)
        self._inside += 1
        try:
            async with self._slots:
                yield
        finally:
            self._inside -= 1
