"""What a page the plugin serves asks of the browser: its own origin, and cookies only it can set.

The approval page (:mod:`mcp_bridge.approvals.page`), the sign-in route of the action server
(:mod:`mcp_bridge.action_server.sign_in`) and the example's chat page (``devstack/chat_page.py``) keep these
rules, each over its :class:`PageOrigin`:

``origin_required``
   A request that changes anything (a POST: a login, a logout, a decision, a new session, a token)
   counts only with an ``Origin`` header naming the page itself. Browsers send one on every POST,
   same-origin fetches and form posts included; a request without one is no page's, and is refused
   (:meth:`PageOrigin.allows`). ``Sec-Fetch-Site``, when a browser sends it, must say ``same-origin``.
   The page's origins are those of its public URL, or, on loopback without one, ``127.0.0.1``,
   ``localhost`` and ``[::1]`` on its port: a name rebound to 127.0.0.1 by another site's DNS is none.
``host_cookies``
   A session cookie is a ``__Host-`` cookie (``Secure``, ``Path=/``, no ``Domain``: a sibling site
   cannot set or widen it), ``HttpOnly`` and ``SameSite=Strict``, named after the page and its port
   (:meth:`PageOrigin.cookie_name`: ``__Host-chat_session-8080``), because browsers send a host's
   cookies to every port of it: two pages on one host never read or overwrite each other's. Browsers
   keep ``Secure`` cookies over https and on loopback (``http://127.0.0.1``, ``http://localhost``),
   so a page must be reached over one of those: :meth:`PageOrigin.for_page` refuses a plain http
   public URL on any other host.
``behind_a_proxy``
   A page behind a proxy that terminates TLS is given its public ``https://`` URL (its cookies are
   ``Secure`` whatever the proxy says). Who is asking (for a rate limit) is the peer's address; the
   ``X-Forwarded-For`` a proxy appends is read only when the page is told it is behind one
   (``trust_proxy``), since any client can send the header.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["LOOPBACK_NAMES", "PageOrigin", "is_loopback"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """``host`` (a name or an address, IPv6 with or without brackets) is this machine's loopback."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class PageOrigin:
    """Where browsers reach a page: the origins its requests must name, its port, and whether a proxy
    in front of it says who is asking."""

    origins: frozenset[str]
    port: int
    trust_proxy: bool = False

    @classmethod
    def for_page(
        cls, public_url: str | None, host: str, port: int, *, trust_proxy: bool = False
    ) -> PageOrigin:
        """The page's origin: its public URL's (``https://chat.example.com``), or, without one, the
        address it listens on, which must then be loopback. ValueError (saying what to set) for a page
        whose session cookie a browser would not keep or would send unencrypted."""
        if public_url:
            parts = urlsplit(public_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"the public URL {public_url!r} is not an http(s) URL")
            if parts.scheme == "http" and not is_loopback(parts.hostname):
                raise ValueError(
                    f"the public URL {public_url!r} is plain http on another host than loopback: its "
                    "session cookie would travel unencrypted. Serve it over https (a proxy that "
                    "terminates TLS in front, and its https:// URL as the public URL)"
                )
            public_port = parts.port or (443 if parts.scheme == "https" else 80)
            return cls(frozenset({f"{parts.scheme}://{parts.netloc.lower()}"}), public_port, trust_proxy)
        if not is_loopback(host):
            raise ValueError(
                f"listening on {host}, which is not loopback, without a public URL: give the URL "
                "browsers reach the page at (https://...)"
            )
        return cls(frozenset(f"http://{name}:{port}" for name in LOOPBACK_NAMES), port, trust_proxy)

    def cookie_name(self, base: str) -> str:
        """``__Host-<base>-<port>``: the page's own cookie, apart from any other page's on the host."""
        return f"__Host-{base}-{self.port}"

    def allows(self, origin: str | None, fetch_site: str | None) -> bool:
        """``origin_required``: a state-changing request from this page (its ``Origin`` and
        ``Sec-Fetch-Site`` headers); False without an Origin."""
        if fetch_site is not None and fetch_site != "same-origin":
            return False
        return origin is not None and origin.lower() in self.origins

    def client(self, remote: str | None, headers: Mapping[str, str]) -> str:
        """Who is asking, for rate limits: the peer's address, or (``trust_proxy`` only) the address
        the proxy in front appended last to ``X-Forwarded-For``."""
        if self.trust_proxy:
            forwarded = headers.get("X-Forwarded-For", "")
            last = forwarded.split(",")[-1].strip()
            if last:
                return last[:64]
        return remote or "unknown"

    def session_cookie(self, base: str, value: str, max_age: int | None = None) -> str:
        """The ``Set-Cookie`` value of a session cookie (``host_cookies``)."""
        lifetime = f"; Max-Age={max_age}" if max_age is not None else ""
        return f"{self.cookie_name(base)}={value}; Path=/; Secure; HttpOnly; SameSite=Strict{lifetime}"

    def cleared_cookie(self, base: str) -> str:
        """The ``Set-Cookie`` value that removes the session cookie."""
        return self.session_cookie(base, "", max_age=0)
