"""Where the people's OAuth tokens are kept: encrypted at rest, shared by every replica.

One row per (person, MCP server): the SDK's :class:`~mcp.shared.auth.OAuthToken` as JSON with the
time it was obtained, encrypted with AES-256-GCM (``cryptography``) under a key derived from
``MCP_TOKEN_KEY``, with the row itself (the person's name digest and the server) as associated data:
a database writer who moves one person's ciphertext into another's row gets nothing that decrypts.
Rows written by release 0.3.0 are still read, by :class:`mcp_bridge.release_0_3.TokenRows`, and
written this release's way the next time they change. A second table holds the sign-ins under way: the PKCE
verifier of each, encrypted too and bound to its nonce, taken (read and deleted in one statement) by
the callback that completes it, so a sign-in completes once. The person's name is stored as an HMAC of
it, never in clear.

Both are tables of the plugin's one database (:mod:`mcp_bridge.record.database`: SQLite by default,
PostgreSQL for replicas, ``MCP_BRIDGE_DATABASE``). Neither a token nor the key is ever logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mcp_bridge.config.random_values import looks_like_a_placeholder
from mcp_bridge.errors import ConfigError
from mcp_bridge.record.database import Database, open_database
from mcp_bridge.release_0_3 import TokenRows

KEY_VARIABLE = "MCP_TOKEN_KEY"
MIN_KEY_BYTES = 32
# A ciphertext bound to its row: "v2." and the base64 of the 12-byte nonce and AES-GCM's output.
_BOUND = "v2."


@dataclass(frozen=True)
class Keys:
    """The keys derived from ``MCP_TOKEN_KEY``: one encrypts tokens bound to their row (``rows``), one
    seals sign-in states, one names people in the store; ``rows_0_3`` reads the rows release 0.3.0
    wrote. Derived apart (HKDF), so no value serves two purposes."""

    states: Fernet
    names: bytes
    rows: AESGCM
    rows_0_3: TokenRows

    @classmethod
    def from_secret(cls, secret: bytes) -> Keys:
        def derive(purpose: bytes) -> bytes:
            return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(secret)

        return cls(
            states=Fernet(base64.urlsafe_b64encode(derive(b"mcp-bridge sign-in state"))),
            names=derive(b"mcp-bridge person names"),
            rows=AESGCM(derive(b"mcp-bridge tokens bound to their row")),
            rows_0_3=TokenRows.derived(derive),
        )

    def bind(self, plain: bytes, row: str) -> str:
        """``plain`` encrypted for ``row`` only."""
        nonce = os.urandom(12)
        return (
            _BOUND + base64.urlsafe_b64encode(nonce + self.rows.encrypt(nonce, plain, row.encode())).decode()
        )

    def unbind(self, sealed: str, row: str) -> bytes | None:
        """What :meth:`bind` encrypted for ``row``, or None (another row's, another key's, or edited); a
        value without the ``v2.`` prefix is release 0.3.0's, bound to no row."""
        if not sealed.startswith(_BOUND):
            return self.rows_0_3.read(sealed)
        try:
            raw = base64.urlsafe_b64decode(sealed[len(_BOUND) :].encode())
            return self.rows.decrypt(raw[:12], raw[12:], row.encode())
        except (InvalidTag, ValueError):
            return None


def token_keys(secret: str | None) -> Keys:
    """The keys for ``secret``, the value of ``MCP_TOKEN_KEY``; refuses a missing, short or placeholder
    one (ConfigError).

    Whoever has it can read every stored token and forge a sign-in: it must be long and random, and
    the same on every replica (one replica reads what another stored).
    """
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
    elif looks_like_a_placeholder(secret):
        weakness = "looks like a placeholder, not a random value"
    else:
        return Keys.from_secret(secret.encode())
    raise ConfigError(
        f"environment variable {KEY_VARIABLE} {weakness}: anyone who can guess it can read the people's "
        f"tokens and forge a sign-in. {advice}"
    )


class TokenStore:
    """The people's tokens per (person, server) and the sign-ins under way, encrypted, in the plugin's
    database."""

    def __init__(self, database: Database, keys: Keys, *, owns: bool = False) -> None:
        """``owns``: the store opened ``database`` itself, and closes it."""
        self._keys = keys
        self._db = database
        self._owns = owns

    @classmethod
    def open(cls, location: str, keys: Keys) -> TokenStore:
        """A store in the database ``location`` names, which it opens and closes itself."""
        return cls(open_database(location), keys, owns=True)

    @property
    def keys(self) -> Keys:
        return self._keys

    def _name(self, person: str) -> str:
        return hmac.new(self._keys.names, person.encode(), hashlib.sha256).hexdigest()

    async def get(self, person: str, server: str) -> dict[str, Any] | None:
        name = self._name(person)
        rows = await self._db.fetch(
            "SELECT sealed FROM mcp_tokens WHERE person = ? AND server = ?", name, server
        )
        if not rows:
            return None
        plain = self._keys.unbind(str(rows[0][0]), _token_row(name, server))
        if plain is None:
            return None  # another key's, or another row's: as good as no token (the person signs in again)
        try:
            value: dict[str, Any] = json.loads(plain)
        except ValueError:
            return None
        return value

    async def put(self, person: str, server: str, record: Mapping[str, Any]) -> None:
        name = self._name(person)
        sealed = self._keys.bind(json.dumps(dict(record)).encode(), _token_row(name, server))
        await self._db.execute(
            "INSERT INTO mcp_tokens (person, server, sealed, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (person, server) DO UPDATE SET sealed = excluded.sealed, "
            "updated_at = excluded.updated_at",
            name,
            server,
            sealed,
            time.time(),
        )

    async def delete(self, person: str, server: str) -> bool:
        rows = await self._db.fetch(
            "DELETE FROM mcp_tokens WHERE person = ? AND server = ? RETURNING server",
            self._name(person),
            server,
        )
        return bool(rows)

    async def begin_sign_in(self, nonce: str, verifier: str, expires_at: float) -> None:
        sealed = self._keys.bind(verifier.encode(), _sign_in_row(nonce))
        await self._db.execute("DELETE FROM mcp_sign_ins WHERE expires_at < ?", time.time())
        await self._db.execute(
            "INSERT INTO mcp_sign_ins (nonce, sealed, expires_at) VALUES (?, ?, ?)", nonce, sealed, expires_at
        )

    async def take_sign_in(self, nonce: str) -> str | None:
        """The PKCE verifier of sign-in ``nonce``, once: the row is deleted as it is read."""
        rows = await self._db.fetch(
            "DELETE FROM mcp_sign_ins WHERE nonce = ? RETURNING sealed, expires_at", nonce
        )
        if not rows or float(rows[0][1]) < time.time():
            return None
        plain = self._keys.unbind(str(rows[0][0]), _sign_in_row(nonce))
        return plain.decode() if plain is not None else None

    async def close(self) -> None:
        if self._owns:
            await self._db.aclose()


def _token_row(name: str, server: str) -> str:
    return f"mcp_tokens\x00{name}\x00{server}"


def _sign_in_row(nonce: str) -> str:
    return f"mcp_sign_ins\x00{nonce}"
