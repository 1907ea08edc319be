"""Where the people's OAuth tokens are kept: encrypted at rest, shared by every replica.

One row per (person, MCP server): the SDK's :class:`~mcp.shared.auth.OAuthToken` as JSON with the
time it was obtained, encrypted with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) under
a key derived from ``MCP_TOKEN_KEY``. A second table holds the sign-ins under way: the PKCE verifier
of each, encrypted too, taken (read and deleted in one statement) by the callback that completes it,
so a sign-in completes once. The person's name is stored as an HMAC of it, never in clear.

SQLite (a file; the default, ``var/mcp_tokens.sqlite3``) or PostgreSQL (``MCP_TOKEN_STORE`` a
``postgresql://`` URL, as the cluster runs, through ``asyncpg``). Neither a token nor the key is
ever logged.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mcp_bridge.errors import ConfigError

KEY_VARIABLE = "MCP_TOKEN_KEY"
STORE_VARIABLE = "MCP_TOKEN_STORE"
DEFAULT_STORE = "var/mcp_tokens.sqlite3"
MIN_KEY_BYTES = 32
_PLACEHOLDER = re.compile(r"\$[0-9]+")  # asyncpg's $1, $2 ... as SQLite's ?
_PLACEHOLDERS = ("change", "placeholder", "example", "replace", "your-secret", "your_secret", "secret-here")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS mcp_tokens (person TEXT NOT NULL, server TEXT NOT NULL, "
    "sealed TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (person, server))",
    "CREATE TABLE IF NOT EXISTS mcp_sign_ins (nonce TEXT PRIMARY KEY, sealed TEXT NOT NULL, "
    "expires_at DOUBLE PRECISION NOT NULL)",
)


@dataclass(frozen=True)
class Keys:
    """The keys derived from ``MCP_TOKEN_KEY``: one encrypts tokens, one seals sign-in states, one
    names people in the store. Derived apart (HKDF), so no value serves two purposes."""

    tokens: Fernet
    states: Fernet
    names: bytes

    @classmethod
    def from_secret(cls, secret: bytes) -> Keys:
        def derive(purpose: bytes) -> bytes:
            return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(secret)

        return cls(
            tokens=Fernet(base64.urlsafe_b64encode(derive(b"mcp-bridge tokens at rest"))),
            states=Fernet(base64.urlsafe_b64encode(derive(b"mcp-bridge sign-in state"))),
            names=derive(b"mcp-bridge person names"),
        )


def token_keys(env: Mapping[str, str]) -> Keys:
    """The keys for ``MCP_TOKEN_KEY``; refuses a missing, short or placeholder one (ConfigError).

    Whoever has it can read every stored token and forge a sign-in: it must be long and random, and
    the same on every replica (one replica reads what another stored).
    """
    secret = env.get(KEY_VARIABLE)
    advice = (
        "Use at least 32 random bytes, e.g. the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`, the same on every replica"
    )
    if not secret:
        raise ConfigError(
            f"environment variable {KEY_VARIABLE} is not set: an MCP server in endpoints.yml acts as "
            "the person (oauth grant authorization_code), and their tokens are stored encrypted with it. "
            f"{advice}"
        )
    size = len(secret.encode())
    if size < MIN_KEY_BYTES:
        weakness = f"is {size} bytes long, shorter than {MIN_KEY_BYTES}"
    elif any(word in secret.lower() for word in _PLACEHOLDERS) or len(set(secret)) < 8:
        weakness = "looks like a placeholder, not a random value"
    else:
        return Keys.from_secret(secret.encode())
    raise ConfigError(
        f"environment variable {KEY_VARIABLE} {weakness}: anyone who can guess it can read the people's "
        f"tokens and forge a sign-in. {advice}"
    )


class _Backend(Protocol):
    async def execute(self, sql: str, *args: Any) -> list[tuple[Any, ...]]: ...

    async def close(self) -> None: ...


class _SQLite:
    """One connection per statement in a thread: every replica on the host reads the same file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        for statement in _SCHEMA:
            self._run(statement, ())
        path.chmod(0o600)

    def _run(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        connection = sqlite3.connect(self._path, timeout=10)
        try:
            with connection:
                return list(connection.execute(_PLACEHOLDER.sub("?", sql), args))
        finally:
            connection.close()

    async def execute(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return await asyncio.to_thread(self._run, sql, args)

    async def close(self) -> None:
        return None


class _Postgres:
    def __init__(self, url: str) -> None:
        self._url = url
        self._pool: Any = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> Any:
        async with self._lock:
            if self._pool is None:
                import asyncpg  # only a deployment with a PostgreSQL store needs it

                pool = await asyncpg.create_pool(self._url, min_size=0, max_size=4)
                async with pool.acquire() as connection, connection.transaction():
                    await connection.execute("SELECT pg_advisory_xact_lock(7235)")  # "MCPT"-ish, any constant
                    for statement in _SCHEMA:
                        await connection.execute(statement)
                self._pool = pool
            return self._pool

    async def execute(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        pool = await self._connect()
        rows = await pool.fetch(sql, *args)
        return [tuple(row) for row in rows]

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


class TokenStore:
    """The people's tokens per (person, server) and the sign-ins under way, encrypted."""

    def __init__(self, location: str, keys: Keys) -> None:
        self._keys = keys
        self.location = location
        if location.startswith(("postgres://", "postgresql://")):
            self._db: _Backend = _Postgres(location)
        else:
            self._db = _SQLite(Path(location))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TokenStore:
        return cls(env.get(STORE_VARIABLE) or DEFAULT_STORE, token_keys(env))

    @property
    def keys(self) -> Keys:
        return self._keys

    def _name(self, person: str) -> str:
        return hmac.new(self._keys.names, person.encode(), hashlib.sha256).hexdigest()

    async def get(self, person: str, server: str) -> dict[str, Any] | None:
        rows = await self._db.execute(
            "SELECT sealed FROM mcp_tokens WHERE person = $1 AND server = $2", self._name(person), server
        )
        if not rows:
            return None
        try:
            value: dict[str, Any] = json.loads(self._keys.tokens.decrypt(str(rows[0][0]).encode()))
        except (InvalidToken, ValueError):
            return None  # written under another key: as good as no token (the person signs in again)
        return value

    async def put(self, person: str, server: str, record: Mapping[str, Any]) -> None:
        sealed = self._keys.tokens.encrypt(json.dumps(dict(record)).encode()).decode()
        await self._db.execute(
            "INSERT INTO mcp_tokens (person, server, sealed, updated_at) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (person, server) DO UPDATE SET sealed = excluded.sealed, "
            "updated_at = excluded.updated_at",
            self._name(person),
            server,
            sealed,
            time.time(),
        )

    async def delete(self, person: str, server: str) -> bool:
        rows = await self._db.execute(
            "DELETE FROM mcp_tokens WHERE person = $1 AND server = $2 RETURNING server",
            self._name(person),
            server,
        )
        return bool(rows)

    async def begin_sign_in(self, nonce: str, verifier: str, expires_at: float) -> None:
        sealed = self._keys.tokens.encrypt(verifier.encode()).decode()
        await self._db.execute("DELETE FROM mcp_sign_ins WHERE expires_at < $1", time.time())
        await self._db.execute(
            "INSERT INTO mcp_sign_ins (nonce, sealed, expires_at) VALUES ($1, $2, $3)",
            nonce,
            sealed,
            expires_at,
        )

    async def take_sign_in(self, nonce: str) -> str | None:
        """The PKCE verifier of sign-in ``nonce``, once: the row is deleted as it is read."""
        rows = await self._db.execute(
            "DELETE FROM mcp_sign_ins WHERE nonce = $1 RETURNING sealed, expires_at", nonce
        )
        if not rows or float(rows[0][1]) < time.time():
            return None
        try:
            return self._keys.tokens.decrypt(str(rows[0][0]).encode()).decode()
        except InvalidToken:
            return None

    async def close(self) -> None:
        await self._db.close()
