"""OAuth 2 client credentials for an MCP server (Rasa Pro's ``oauth:`` block), on the SDK's provider.

The MCP SDK's :class:`ClientCredentialsOAuthProvider` does the OAuth: on a 401 it reads the
server's protected-resource metadata and the authorization server's metadata, asks for a token
(with the RFC 8707 ``resource`` the server names), and repeats the refused request once with it.
The bridge adds only what Rasa Pro's block means and the SDK does not do:

* with ``token_url`` the client secret goes there and nowhere else, whatever the MCP server's
  metadata points at (Rasa Pro posts there directly). Without it the token endpoint is the one
  discovery finds, as the MCP client-credentials extension expects: the server's 401 names its
  protected-resource metadata (RFC 9728), that names the authorization server, whose metadata
  (RFC 8414) names the token endpoint. Never the SDK's guess when nothing is found (``/token`` on
  the MCP server's own origin): no metadata, no token request. ``issuer`` pins the authorization
  server: the SDK then builds a token request only from metadata whose issuer is that one, so a
  server that names another gets no secret (:class:`OAuthFlowError`, nothing sent);
* the configured ``scope`` is what is asked for (the SDK would take the server's challenge), and
  ``audience``, when set, is sent as the ``audience`` parameter as Rasa Pro sends it;
* the token request gives up after ``timeout`` seconds;
* a token counts as expired a little before it is (:data:`RENEW_BEFORE_MAX`), so no call is
  sent with a token that lapses on the way; the next request then gets a new one;
* calls to one server run side by side: the SDK's flow holds its lock from sending a request until
  the answer arrives, which would put a server's calls in single file (the bridge exists partly to
  avoid that). With a valid token a request is sent without the SDK's flow; only a refused one goes
  through it, handed the refusal rather than sending the request a second time.

One provider per server, kept by the runtime across sessions, so a reconnect reuses the token.
Tokens live in memory only; neither they nor the secret are ever logged.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from urllib.parse import parse_qsl, urlencode

from mcp_bridge.config.servers import OAuthConfig
from mcp_bridge.mcp_sdk import (
    ClientCredentialsOAuthProvider,
    OAuthClientInformationFull,
    OAuthFlowError,
    OAuthToken,
    http,
)

# Set in a request's extensions on the requests the OAuth flow makes itself: the transport
# (mcp_bridge.mcp_client.transport) never counts them as tool calls.
AUTH_REQUEST = "mcp_bridge_auth_request"
# A token is renewed this long before it expires: a tenth of its lifetime, at most 30 s.
RENEW_BEFORE_MAX = 30.0
RENEW_BEFORE_SHARE = 0.1


class _MemoryStorage:
    """The SDK's TokenStorage, in this process only (a client credentials token is cheap to get)."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


class ClientCredentials(ClientCredentialsOAuthProvider):
    """An ``http.Auth`` for one MCP server: the SDK's client credentials flow, as configured."""

    def __init__(self, server_url: str, oauth: OAuthConfig) -> None:
        # Without `issuer` the SDK warns that the MCP server decides where the credentials go; the
        # warning is silenced there (mcp_bridge.mcp_sdk): with a token_url they go there alone
        # (_get_token_endpoint below), without one to the server discovery found, as configured.
        super().__init__(
            server_url,
            _MemoryStorage(),
            client_id=oauth.client_id,
            client_secret=oauth.client_secret,
            scope=oauth.scope,
            issuer=oauth.issuer,
        )
        self._oauth = oauth
        self.tokens_obtained = 0

    async def async_auth_flow(self, request: http.Request) -> AsyncGenerator[http.Request, http.Response]:
        refused: http.Response | None = None
        held = self.context.current_tokens
        used = f"Bearer {held.access_token}" if held is not None else None
        if self._initialized and used is not None and self.context.is_token_valid():
            request.headers["Authorization"] = used
            response = yield request
            if response.status_code not in (401, 403):
                return
            refused = response
        # No token yet, one about to expire, or one refused: the SDK's flow.
        flow = super().async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            if refused is not None and outgoing is request and request.headers.get("Authorization") == used:
                # The SDK would send the request again with the token just refused; it gets that
                # refusal instead (and then renews and retries once). Had another call renewed the
                # token meanwhile, the request goes out with the new one.
                outgoing = await flow.asend(refused)
            while True:
                outgoing = await flow.asend((yield outgoing))
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    def _get_token_endpoint(self) -> str:
        if self._oauth.token_url:
            return self._oauth.token_url
        metadata = self.context.oauth_metadata
        if metadata is None or metadata.token_endpoint is None:
            raise OAuthFlowError(
                "no token endpoint: oauth.token_url is not set and the server's protected-resource and "
                "authorization server metadata name none; the client secret was not sent"
            )
        return str(metadata.token_endpoint)

    async def _exchange_token_client_credentials(self) -> http.Request:
        if self._oauth.scope:
            self.context.client_metadata.scope = self._oauth.scope
        request = await super()._exchange_token_client_credentials()
        if self._oauth.audience:
            form = parse_qsl(request.content.decode("ascii"), keep_blank_values=True)
            form.append(("audience", self._oauth.audience))
            headers = {
                name: value for name, value in request.headers.items() if name.lower() != "content-length"
            }
            request = http.Request(
                "POST", request.url, content=urlencode(form).encode("ascii"), headers=headers
            )
        seconds = self._oauth.timeout
        request.extensions["timeout"] = {
            "connect": seconds,
            "read": seconds,
            "write": seconds,
            "pool": seconds,
        }
        request.extensions[AUTH_REQUEST] = True  # the transport never counts it as a tool call
        return request

    async def _handle_token_response(self, response: http.Response) -> None:
        await super()._handle_token_response(response)
        self.tokens_obtained += 1
        tokens, expiry = self.context.current_tokens, self.context.token_expiry_time
        if tokens is not None and tokens.expires_in and expiry is not None:
            self.context.token_expiry_time = expiry - min(
                RENEW_BEFORE_MAX, RENEW_BEFORE_SHARE * tokens.expires_in
            )
