"""Talks to the Rasa server as a person would: the REST channel (with its bearer token), one message
at a time; and to Rasa's HTTP API (with its token) for what the NLU made of a message."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from tests.support.procs import RasaAccess

TIMEOUT = 60.0


class ChatError(Exception):
    """The Rasa server did not answer a message with a list of bot messages."""


class RasaChat:
    def __init__(self, base_url: str, access: RasaAccess, timeout: float = TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/")
        self.access = access
        self.timeout = timeout

    def _post(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None, query: str = ""
    ) -> Any:
        """POST to `path`; `query` (which may carry a token) is never part of an error message."""
        request = urllib.request.Request(
            f"{self.base_url}{path}{query}",
            data=json.dumps(body).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise ChatError(f"POST {path} answered {exc.code}: {exc.read()[:300]!r}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ChatError(f"POST {path} failed: {exc}") from None

    def send(self, sender: str, message: str) -> list[str]:
        """Send one message; the bot's text messages in the order it said them."""
        answer = self._post(
            "/webhooks/rest/webhook", {"sender": sender, "message": message}, self.access.rest_headers()
        )
        if not isinstance(answer, list):
            raise ChatError(f"the REST channel answered {answer!r}, not a list of messages")
        return [str(item["text"]) for item in answer if isinstance(item, dict) and "text" in item]

    def intent_of(self, message: str) -> str:
        """How the NLU reads ``message`` (`affirm 0.98`), for failure reports; never raises."""
        try:
            query = "?" + urllib.parse.urlencode({"token": self.access.api_token})
            parsed = self._post("/model/parse", {"text": message}, query=query)
            intent = parsed.get("intent") or {}
            return f"{intent.get('name')} {float(intent.get('confidence') or 0.0):.2f}"
        except (ChatError, AttributeError, TypeError, ValueError) as exc:
            return f"unknown ({exc})"
