"""Microsoft Teams through the Bot Framework, signed: in place of Rasa's ``botframework`` channel.

```yaml
# credentials.yml (in place of `botframework:`)
mcp_bridge.channels.botframework.SignedBotFrameworkInput:
  app_id: "${MICROSOFT_APP_ID}"              # the bot's Microsoft App ID
  app_password: "${MICROSOFT_APP_PASSWORD}"  # its client secret
  tenant_ids: [00000000-0000-0000-0000-000000000000]   # the Microsoft Entra tenants it serves
```

The Bot Connector service posts each activity to ``/webhooks/botframework/webhook`` with
``Authorization: Bearer <JWT>``. Before anything else, as Microsoft documents ("Authentication with
the Bot Connector API", the channel's token to the bot):

* the token must be signed (RS256, RS384 or RS512) by a key of the OpenID keys the metadata
  document at ``openid_metadata_url`` names (default
  ``https://login.botframework.com/v1/.well-known/openidconfiguration``; fetched on first use, again
  daily, and when a token names a key not seen yet, at most once a minute), with issuer
  ``https://api.botframework.com``, audience ``app_id``, and ``exp``/``nbf`` within five minutes of
  clock skew; else 401;
* the signing key must be endorsed for the activity's ``channelId``, and the token's ``serviceurl``
  claim must be the activity's ``serviceUrl`` (the address replies go to, which the body alone could
  otherwise point anywhere); else 401;
* the ``channelId`` must be in ``channel_ids`` (default ``msteams``) and the conversation's tenant
  (``conversation.tenantId``, or ``channelData.tenant.id``) in ``tenant_ids``; else 403;
* an activity ``id`` seen before in its conversation is dropped, answered 200 and logged.

The body is not signed by the platform (the token proves the Bot Connector sent it, over TLS), and a
token is valid for its lifetime, about an hour: the activity id is the replay check.

The person is ``botframework:<tenant>/<Entra object id>`` (``from.aadObjectId``; ``from.id`` when
there is none); the conversation ``botframework_<tenant>_<conversation>_<person>`` (a Teams
conversation id, ``a:1...`` or ``19:...@thread.tacv2``, as a digest of it). Replies go to the
``serviceUrl`` of the conversation's latest verified activity, with a token the bot gets from
``token_url`` by client credentials (default ``https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token``;
a single-tenant bot uses its tenant's).

A question's buttons are an Adaptive Card's ``Action.Submit`` actions whose ``data`` carry the
payload tagged with the conversation: a press comes back as a message whose ``value`` holds it, and
is handed to Rasa as its payload, signed like a typed answer; a press whose tag is not the pressing
person's conversation is refused (403). Typed answers work everywhere. In a channel or group chat,
Teams puts the bot's mention (``<at>...</at>``) in the text; it is taken out.

Azure Bot settings: Messaging endpoint ``https://<rasa>/webhooks/botframework/webhook``; the Microsoft
Teams channel on.

Settings: ``app_id``, ``app_password``, ``tenant_ids`` (required), ``channel_ids``,
``openid_metadata_url``, ``token_url``, ``channel_key``, ``max_body_bytes``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from rasa.core.channels.channel import InputChannel, OutputChannel, UserMessage
from sanic import Blueprint, response
from sanic.request import Request
from sanic.response import HTTPResponse

from mcp_bridge.channels.platform import FOREIGN_PRESS, PlatformAPI, PlatformInput, Replays, Speaker

logger = logging.getLogger(__name__)

DEFAULT_OPENID_METADATA_URL = "https://login.botframework.com/v1/.well-known/openidconfiguration"
DEFAULT_TOKEN_URL = "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"
ISSUER = "https://api.botframework.com"
TOKEN_SCOPE = "https://api.botframework.com/.default"
ALGORITHMS = ("RS256", "RS384", "RS512")
CLOCK_SKEW_SECONDS = 300
MAX_TOKEN_CHARS = 8192
# The OpenID keys are fetched again daily, and for a key id not seen yet at most this often.
KEYS_MAX_AGE_SECONDS = 24 * 3600
UNKNOWN_KEY_REFETCH_SECONDS = 60
# A token lives about an hour: activity ids are kept a little longer.
KEEP_ACTIVITY_IDS_SECONDS = 2 * 3600
# Where to reply in the conversations seen lately (the latest verified activity of each).
MAX_ADDRESSES = 10_000
BUTTON_KEY = "mcp_bridge_button"
_KNOWN = {"app_id", "app_password", "tenant_ids", "channel_ids", "openid_metadata_url", "token_url"}
_MENTION = re.compile(r"<at>[^<]{0,200}</at>")


@dataclass(frozen=True)
class Address:
    """Where the replies of a conversation go: its service, its id there, the bot and the person."""

    service_url: str
    conversation_id: str
    bot: dict[str, Any]
    person: dict[str, Any]


class OpenIdKeys:
    """The Bot Connector's signing keys, from its OpenID metadata document's ``jwks_uri``."""

    def __init__(self, api: PlatformAPI, metadata_url: str) -> None:
        self.api = api
        self.metadata_url = metadata_url
        self._keys: dict[str, dict[str, Any]] = {}
        self._read_at: float | None = None  # when the keys were last read
        self._tried_at: float | None = None  # when they were last asked for (read or not)
        self._lock = asyncio.Lock()

    async def key(self, key_id: str) -> dict[str, Any] | None:
        """The JWK of ``key_id`` (with its ``endorsements``), or None when the platform lists none."""
        async with self._lock:
            now = time.monotonic()
            stale = self._read_at is None or now - self._read_at > KEYS_MAX_AGE_SECONDS
            may_ask = self._tried_at is None or now - self._tried_at > UNKNOWN_KEY_REFETCH_SECONDS
            if (stale or key_id not in self._keys) and may_ask:
                self._tried_at = now
                await self._fetch()
        return self._keys.get(key_id)

    async def _fetch(self) -> None:
        metadata = await self.api.call("the OpenID metadata request", "GET", self.metadata_url)
        jwks_uri = metadata.get("jwks_uri") if isinstance(metadata, dict) else None
        keys = (
            await self.api.call("the OpenID keys request", "GET", jwks_uri)
            if isinstance(jwks_uri, str)
            else None
        )
        listed = keys.get("keys") if isinstance(keys, dict) else None
        if not isinstance(listed, list):
            logger.error("botframework: the OpenID keys could not be read; the keys known so far stay")
            return
        self._keys = {
            str(k["kid"]): k for k in listed if isinstance(k, dict) and isinstance(k.get("kid"), str)
        }
        self._read_at = time.monotonic()


class BotFrameworkOutput(OutputChannel):
    """Posts activities to the conversation's Bot Connector service (its latest verified address)."""

    @classmethod
    def name(cls) -> str:
        return "botframework"

    def __init__(self, channel: SignedBotFrameworkInput) -> None:
        super().__init__()
        self.input = channel

    async def _send(self, recipient_id: str, activity: dict[str, Any]) -> None:
        address = self.input.addresses.get(recipient_id)
        if address is None:
            logger.error("botframework: no verified activity of this conversation came in yet; nothing sent")
            return
        token = await self.input.access_token()
        if token is None:
            return
        conversation = urllib.parse.quote(address.conversation_id, safe="")
        await self.input.api.call(
            "the activity post",
            "POST",
            f"{address.service_url.rstrip('/')}/v3/conversations/{conversation}/activities",
            json_body={
                "type": "message",
                "from": address.bot,
                "recipient": address.person,
                "conversation": {"id": address.conversation_id},
                **activity,
            },
            headers={"Authorization": f"Bearer {token}"},
        )

    async def send_text_message(self, recipient_id: str, text: str, **kwargs: Any) -> None:
        for part in text.strip().split("\n\n"):
            await self._send(recipient_id, {"text": part})

    async def send_text_with_buttons(
        self, recipient_id: str, text: str, buttons: list[dict[str, Any]], **kwargs: Any
    ) -> None:
        actions = [
            {
                "type": "Action.Submit",
                "title": str(button.get("title") or button["payload"]),
                "data": {BUTTON_KEY: self.input.vouching.button(recipient_id, button["payload"])},
            }
            for button in buttons
            if isinstance(button.get("payload"), str)
        ]
        card = {
            "type": "AdaptiveCard",
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "version": "1.4",
            "body": [{"type": "TextBlock", "text": text, "wrap": True}],
            "actions": actions,
        }
        attachment = {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
        await self._send(recipient_id, {"text": "", "attachments": [attachment]})


class SignedBotFrameworkInput(PlatformInput):
    """The Bot Framework's activities, each checked against the Bot Connector's signed token."""

    @classmethod
    def name(cls) -> str:
        return "botframework"

    @classmethod
    def from_credentials(cls, credentials: dict[str, Any] | None) -> InputChannel:
        settings = cls.settings(credentials, _KNOWN)
        return cls(
            app_id=settings.text("app_id"),
            app_password=settings.secret("app_password"),
            tenant_ids=settings.text_list("tenant_ids"),
            channel_ids=settings.text_list("channel_ids")
            if "channel_ids" in settings.values
            else ("msteams",),
            openid_metadata_url=settings.text("openid_metadata_url", DEFAULT_OPENID_METADATA_URL),
            token_url=settings.text("token_url", DEFAULT_TOKEN_URL),
            **cls.common(settings),
        )

    def __init__(
        self,
        *,
        app_id: str,
        app_password: str,
        tenant_ids: Sequence[str],
        channel_ids: Sequence[str] = ("msteams",),
        openid_metadata_url: str = DEFAULT_OPENID_METADATA_URL,
        token_url: str = DEFAULT_TOKEN_URL,
        **common: Any,
    ) -> None:
        super().__init__(replays=Replays(KEEP_ACTIVITY_IDS_SECONDS), **common)
        self.app_id = app_id
        self._app_password = app_password
        self.tenant_ids = frozenset(tenant_ids)
        self.channel_ids = frozenset(channel_ids)
        self.token_url = token_url
        self.keys = OpenIdKeys(self.api, openid_metadata_url)
        self.addresses: OrderedDict[str, Address] = OrderedDict()
        self._token: tuple[str, float] | None = None
        self._token_lock = asyncio.Lock()

    def get_output_channel(self) -> OutputChannel:
        return BotFrameworkOutput(self)

    # -- the Bot Connector's proof -----------------------------------------------------------------

    async def verified(self, authorization: str | None) -> tuple[dict[str, Any], dict[str, Any]] | str:
        """The token's claims and its signing key, or why the request is not the Bot Connector's."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return "no Authorization: Bearer token"
        if len(token) > MAX_TOKEN_CHARS:
            return "a token over 8 KiB"
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return "a token that is no JWT"
        algorithm, key_id = header.get("alg"), header.get("kid")
        if algorithm not in ALGORITHMS or not isinstance(key_id, str):
            return f"a token signed with {str(algorithm)[:10]!r} or naming no key (RS256/384/512 with a kid)"
        jwk = await self.keys.key(key_id)
        if jwk is None:
            return "a token signed by a key the OpenID keys do not list"
        try:
            claims = jwt.decode(
                token,
                jwt.PyJWK(jwk, algorithm=algorithm).key,
                algorithms=[algorithm],
                audience=self.app_id,
                issuer=ISSUER,
                leeway=CLOCK_SKEW_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            return f"a token that does not hold ({type(exc).__name__})"
        return claims, jwk

    def _unproven(self, claims: dict[str, Any], jwk: dict[str, Any], activity: dict[str, Any]) -> str | None:
        """Why the verified token does not vouch for this activity, or None."""
        endorsements = jwk.get("endorsements")
        if not isinstance(endorsements, list) or activity.get("channelId") not in endorsements:
            return f"a token whose key is not endorsed for channel {str(activity.get('channelId'))[:32]!r}"
        if claims.get("serviceurl") != activity.get("serviceUrl"):
            return "a token whose serviceurl claim is not the activity's serviceUrl"
        return None

    @staticmethod
    def tenant(activity: dict[str, Any]) -> str | None:
        tenant = (activity.get("conversation") or {}).get("tenantId")
        tenant = tenant or ((activity.get("channelData") or {}).get("tenant") or {}).get("id")
        return tenant if isinstance(tenant, str) and tenant else None

    # -- who speaks ------------------------------------------------------------------------------

    def speaker(self, tenant: str, activity: dict[str, Any]) -> Speaker:
        sender = activity["from"]
        who = str(sender.get("aadObjectId") or sender["id"])
        return self.vouching.speaker([tenant, str(activity["conversation"]["id"]), who], f"{tenant}/{who}")

    def remember(self, speaker: Speaker, activity: dict[str, Any]) -> None:
        self.addresses[speaker.conversation] = Address(
            str(activity["serviceUrl"]),
            str(activity["conversation"]["id"]),
            dict(activity.get("recipient") or {}),
            dict(activity["from"]),
        )
        self.addresses.move_to_end(speaker.conversation)
        while len(self.addresses) > MAX_ADDRESSES:
            self.addresses.popitem(last=False)

    async def access_token(self) -> str | None:
        """The bot's token for the Bot Connector service (client credentials, kept until it expires)."""
        async with self._token_lock:
            if self._token is not None and self._token[1] > time.monotonic():
                return self._token[0]
            answer = await self.api.call(
                "the token request",
                "POST",
                self.token_url,
                form={
                    "grant_type": "client_credentials",
                    "client_id": self.app_id,
                    "client_secret": self._app_password,
                    "scope": TOKEN_SCOPE,
                },
            )
            token = answer.get("access_token") if isinstance(answer, dict) else None
            if not isinstance(token, str):
                logger.error("botframework: no access token for replies; nothing sent")
                return None
            lifetime = float(answer.get("expires_in") or 3600)
            self._token = (token, time.monotonic() + max(lifetime - 300, 60))
            return token

    # -- the route ---------------------------------------------------------------------------------

    def add_routes(self, routes: Blueprint, on_new_message: Callable[[UserMessage], Awaitable[Any]]) -> None:
        @routes.route("/webhook", methods=["POST"])
        async def webhook(request: Request) -> HTTPResponse:
            refusal = self.oversized(request)
            if refusal is not None:
                return refusal
            verified = await self.verified(request.headers.get("authorization"))
            if isinstance(verified, str):
                return self.refuse(401, verified)
            claims, jwk = verified
            try:
                activity = json.loads(request.body or b"")
                if not isinstance(activity, dict):
                    raise ValueError
                reason = self._unproven(claims, jwk, activity)
                if reason is not None:
                    return self.refuse(401, reason)
                return await self._activity(activity, on_new_message)
            except (ValueError, KeyError, TypeError, AttributeError):
                return self.refuse(400, "a body that is not an activity the Bot Connector sends")

    async def _activity(
        self, activity: dict[str, Any], on_new_message: Callable[[UserMessage], Awaitable[Any]]
    ) -> HTTPResponse:
        if activity.get("channelId") not in self.channel_ids:
            return self.refuse(
                403, f"an activity of channel {str(activity.get('channelId'))[:32]!r}, not in channel_ids"
            )
        tenant = self.tenant(activity)
        if tenant not in self.tenant_ids:
            return self.refuse(403, f"an activity of tenant {str(tenant)[:40]!r}, which is not in tenant_ids")
        if activity.get("type") != "message":
            return self.ignored(f"an activity of type {str(activity.get('type'))[:40]!r}")
        if not self.replays.first(f"{activity['conversation']['id']}/{activity['id']}"):
            return self.repeated(f"activity {str(activity['id'])[:60]}")
        speaker = self.speaker(tenant, activity)
        value = activity.get("value")
        if isinstance(value, dict) and BUTTON_KEY in value:
            text = self.vouching.pressed(speaker.conversation, value[BUTTON_KEY])
            if text is None:
                return self.refuse(
                    403,
                    FOREIGN_PRESS,
                )
        elif isinstance(activity.get("text"), str):
            text = _MENTION.sub(" ", activity["text"]).strip()
        else:
            return self.ignored("a message without text")
        self.remember(speaker, activity)
        await on_new_message(self.vouching.message(text, BotFrameworkOutput(self), speaker))
        return response.json({"status": "received"})
