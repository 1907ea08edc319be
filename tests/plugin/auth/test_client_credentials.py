"""The bridge's settings on the SDK's client credentials provider (mcp_bridge.auth.client_credentials),
request by request.

The flow itself (discovery, 401, retry) is the SDK's and is proven live in tests/live/test_mcp_oauth.py.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs

import httpx2
import pytest

from mcp_bridge.auth.client_credentials import AUTH_REQUEST, ClientCredentials
from mcp_bridge.config.servers import OAuthConfig
from mcp_bridge.mcp_sdk import OAuthFlowError, OAuthMetadata

CONFIG = OAuthConfig(
    client_id="bridge",
    client_secret="s3cret",
    token_url="https://auth.example.com/oauth/token",
    scope="crm.notes",
    audience="https://crm.example.com",
    timeout=4.0,
)


async def test_the_token_request_goes_to_token_url_with_scope_and_audience() -> None:
    provider = ClientCredentials("https://crm.example.com/mcp", CONFIG)
    await provider._initialize()
    provider.context.client_metadata.scope = "what the server challenged"
    request = await provider._exchange_token_client_credentials()
    assert str(request.url) == CONFIG.token_url
    form = parse_qs(request.content.decode())
    assert form["grant_type"] == ["client_credentials"]
    assert form["scope"] == ["crm.notes"]
    assert form["audience"] == ["https://crm.example.com"]
    assert "s3cret" not in request.content.decode()  # client_secret_basic: in the header only
    assert request.headers["authorization"].startswith("Basic ")
    assert request.extensions["timeout"]["read"] == 4.0
    assert request.extensions[AUTH_REQUEST] is True


async def test_a_token_is_renewed_shortly_before_it_expires() -> None:
    provider = ClientCredentials("https://crm.example.com/mcp", CONFIG)
    await provider._initialize()
    body = b'{"access_token": "t", "token_type": "Bearer", "expires_in": 100}'
    await provider._handle_token_response(httpx2.Response(200, content=body))
    expiry = provider.context.token_expiry_time
    assert expiry is not None and 89 < expiry - time.time() <= 90  # a tenth early
    await provider._handle_token_response(
        httpx2.Response(200, content=b'{"access_token": "t", "token_type": "Bearer", "expires_in": 3600}')
    )
    expiry = provider.context.token_expiry_time
    assert expiry is not None and 3569 < expiry - time.time() <= 3570  # at most 30 s early
    assert provider.tokens_obtained == 2


async def test_without_token_url_the_token_endpoint_is_the_discovered_one_and_never_a_guess() -> None:
    config = OAuthConfig(client_id="bridge", client_secret="s3cret", scope="crm.notes")
    provider = ClientCredentials("https://crm.example.com/mcp", config)
    await provider._initialize()
    # Nothing discovered: no token request at all (the SDK would guess /token on the MCP server's origin).
    with pytest.raises(OAuthFlowError, match="no token endpoint"):
        await provider._exchange_token_client_credentials()
    provider.context.oauth_metadata = OAuthMetadata.model_validate(
        {
            "issuer": "https://auth.example.com",
            "authorization_endpoint": "https://auth.example.com/authorize",
            "token_endpoint": "https://auth.example.com/oauth/token",
        }
    )
    request = await provider._exchange_token_client_credentials()
    assert str(request.url) == "https://auth.example.com/oauth/token"
    assert request.headers["authorization"].startswith("Basic ")


async def test_a_pinned_issuer_gets_no_token_request_built_from_another_servers_metadata() -> None:
    config = OAuthConfig(client_id="bridge", client_secret="s3cret", issuer="https://auth.example.com")
    provider = ClientCredentials("https://crm.example.com/mcp", config)
    await provider._initialize()
    provider.context.oauth_metadata = OAuthMetadata.model_validate(
        {
            "issuer": "https://elsewhere.example",
            "authorization_endpoint": "https://elsewhere.example/authorize",
            "token_endpoint": "https://elsewhere.example/token",
        }
    )
    with pytest.raises(OAuthFlowError, match="issuer mismatch"):
        await provider._exchange_token_client_credentials()
