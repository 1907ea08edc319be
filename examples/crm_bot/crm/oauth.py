"""The MCP server as an OAuth 2 protected resource: which access tokens it accepts.

Rules, in the order they are checked:

* the token is a JWT signed with a key the authorization server publishes (its JWKS; a key the
  server no longer publishes, or no signature at all, is refused);
* it was issued by the configured issuer, for this resource (``aud``, the RFC 8707 resource
  indicator the client asked for) and has not expired;
* it carries the scope the server requires (checked by the SDK's middleware, which answers 403
  ``insufficient_scope`` so a client can ask for more).

Anything else is a 401 before the MCP layer sees the request: a refused call never ran. The SDK
(``mcp.server.auth``) publishes the protected-resource metadata and sends the challenge; this module
only verifies tokens. Who wrote what is taken from the verified token (``client_id``, ``sub``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from dataclasses import dataclass
from typing import Any

import jwt
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

log = logging.getLogger(__name__)

# Asymmetric algorithms only: an HMAC "signature" would be checked with the public key as secret.
ALGORITHMS = ["RS256", "PS256", "ES256"]
LEEWAY_SECONDS = 5  # clock skew between the authorization server and this one


@dataclass(frozen=True)
class ResourceSettings:
    issuer: str
    resource: str  # this server's URL, published in its protected-resource metadata
    audience: str  # the `aud` a token must carry: by default `resource` (the RFC 8707 indicator)
    scope: str
    jwks_url: str


def discover_jwks_url(issuer: str, timeout: float = 5.0) -> str:
    """The ``jwks_uri`` of the issuer's OpenID configuration (read once, at start-up)."""
    url = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (an http(s) URL from config)
        document = json.load(response)
    jwks_uri = document.get("jwks_uri")
    if not isinstance(jwks_uri, str):
        raise RuntimeError(f"{url} names no jwks_uri")
    return jwks_uri


class JWTVerifier:
    """A :class:`mcp.server.auth.provider.TokenVerifier` for the authorization server's JWTs."""

    def __init__(self, settings: ResourceSettings) -> None:
        self.settings = settings
        # Caches the keys; a token signed with a key it does not know makes it read the JWKS again
        # once (key rotation), and a key the JWKS no longer has is refused.
        self._keys = jwt.PyJWKClient(settings.jwks_url, cache_keys=True, lifespan=300, timeout=5)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await asyncio.to_thread(self._keys.get_signing_key_from_jwt, token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=ALGORITHMS,
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except (jwt.PyJWTError, jwt.PyJWKClientError) as exc:
            # The reason, never the token: it is a credential.
            log.info("access token refused: %s", exc)
            return None
        scope = claims.get("scope")
        client_id = claims.get("client_id") or claims["sub"]
        return AccessToken(
            token=token,
            client_id=str(client_id),
            scopes=scope.split() if isinstance(scope, str) else [],
            expires_at=int(claims["exp"]),
            resource=self.settings.resource,
            subject=str(claims["sub"]),
            claims={"iss": claims["iss"]},
        )


def auth_settings(settings: ResourceSettings) -> AuthSettings:
    return AuthSettings(
        issuer_url=settings.issuer,  # type: ignore[arg-type]  # pydantic parses the URL
        resource_server_url=settings.resource,  # type: ignore[arg-type]
        required_scopes=[settings.scope],
        # The verifier checks the audience itself (above), so the SDK's second check is off.
        validate_token_resource=False,
    )
