"""The audit trail: every question, answer and outcome of a confirmation, and every tool call
the executor makes, one JSON line each, chained so that a removed or edited line is found.

The rules, by name:

``keyed_digests``
    Entries carry digests, never the arguments: an argument's digest is HMAC-SHA256 under the
    deployment's audit key (``AUDIT_KEY``), so an id, an email or a short note cannot be found
    again by hashing guesses without the key. A call entry (``decision: "called"``) has the digest
    of the whole call and one digest per argument (:meth:`AuditKeys.argument_digest`), so a test
    that knows the key checks "this tool was called with this text" without the text ever being
    written down (``mcp-bridge test e2e`` reads ``AUDIT_KEY`` for that).
``chained``
    Each entry names the key that signed it (``kid``), carries the MAC of the entry before it in
    the file (``prev``; empty for the first) and its own MAC over everything else (``mac``).
    ``mcp-bridge audit verify`` (:func:`verify`) recomputes both and names the first line that was
    edited, and the line after a removed one. Several processes (an action server's workers) append
    to one file under an exclusive lock, so the chain is the file's order. Removing lines from the
    end leaves nothing to compare with: ship the entries as they are written (the docs' tracing page).
``rotatable``
    ``AUDIT_KEY`` signs; ``AUDIT_EXTRA_KEYS`` (separated by commas) are former keys, kept to verify
    and match older entries. Rotate by moving the old key there and setting a new one.
``bounded_results``
    A result is at most :data:`RESULT_MAX_CHARS` characters, and every argument value of the call
    it reports on is replaced by ``<argument>`` in it first: a tool's error that quotes what it was
    given does not put the value in the trail.
``owner_only``
    The file is created readable and writable by its owner only (0600); a file that others can read
    is reported when the trail is opened.
``not_in_the_log``
    Entries are not copied into the process log unless ``AUDIT_TO_LOG=1`` asks for it.

Without ``AUDIT_KEY`` the digests and MACs are computed under a public key (with a warning at
start): they still tell accidental damage, not tampering or guesses. Each entry names the process
that wrote it (``pid``). Observers (the metrics, the spans, OpenTelemetry log records) see every
entry as it is recorded, so whatever counts confirmations counts exactly what the trail says.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from mcp_bridge.config.settings import Settings
from mcp_bridge.errors import ConfigError
from mcp_bridge.question import AskedCall, Question

try:  # POSIX: workers of one action server append under an exclusive lock
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: one process per trail
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

AuditObserver = Callable[[Mapping[str, Any]], None]

# Every decision an entry can record, defined here once (the docs' audit page says what each means);
# an entry without one is an ``event``.
AuditDecision = Literal[
    "approval_expired",
    "approval_not_allowed",
    "approval_refused",
    "approval_rejected",
    "approval_requested",
    "approval_resumed",
    "approved",
    "asked",
    "asked_again",
    "called",
    "confirmed",
    "denied",
    "dropped",
    "edited",
    "executed",
    "expired",
    "handed_back",
    "not_asked",
    "not_started",
    "permission_granted",
    "permission_not_used",
    "permission_revoked",
    "permission_used",
    "refused",
    "rejected",
    "unclear",
]
AUDIT_DECISIONS: frozenset[str] = frozenset(get_args(AuditDecision))

CALLED: AuditDecision = "called"
RESULT_MAX_CHARS = 200
MIN_KEY_BYTES = 32
# Without AUDIT_KEY: a key anyone can read here. Digests under it resist nothing but accidents.
PUBLIC_KEY = b"mcp_bridge audit trail: no AUDIT_KEY set (public)"
# The chain's own fields, beside the entry's.
_CHAIN = ("kid", "prev", "mac")
_TAIL_BYTES = 65536


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"mcp_bridge audit key id\x00" + key).hexdigest()[:8]


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class AuditKeys:
    """The audit key ring: the first key signs, every key verifies and matches (``rotatable``)."""

    keys: tuple[bytes, ...] = (PUBLIC_KEY,)
    # False: no AUDIT_KEY was given, so the first key is PUBLIC_KEY.
    configured: bool = False
    _by_id: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("an audit key ring needs at least one key")
        self._by_id.update({_key_id(key): key for key in self.keys})

    @classmethod
    def from_settings(cls, settings: Settings) -> AuditKeys:
        """AUDIT_KEY (signs) and AUDIT_EXTRA_KEYS (former keys); ConfigError for a short one, unless
        MCP_BRIDGE_DEVELOPMENT=1. Neither set: the public key (:attr:`configured` False)."""
        main = settings.audit_key
        extra = settings.audit_extra_keys
        if not main:
            if extra:
                raise ConfigError(
                    "environment variable AUDIT_EXTRA_KEYS is set but AUDIT_KEY is not: the extra keys "
                    "only verify entries they signed; set the key that signs"
                )
            return cls()
        named = [("AUDIT_KEY", main)] + [(f"key {n} of AUDIT_EXTRA_KEYS", k) for n, k in enumerate(extra, 1)]
        for which, value in named:
            size = len(value.encode())
            if size < MIN_KEY_BYTES and not settings.development:
                raise ConfigError(
                    f"environment variable {which} is {size} bytes long, shorter than {MIN_KEY_BYTES}: "
                    "anyone could find the digests' values by trying keys. Use at least 32 random bytes, "
                    "e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`, the same on "
                    "every replica and for `mcp-bridge test e2e` and `mcp-bridge audit verify`"
                )
        return cls(tuple(value.encode() for _, value in named), configured=True)

    @classmethod
    def random(cls) -> AuditKeys:
        """A key ring of one fresh random key (tests)."""
        return cls((secrets.token_bytes(32),), configured=True)

    @property
    def signing_id(self) -> str:
        return _key_id(self.keys[0])

    def key(self, kid: str | None) -> bytes | None:
        """The key named ``kid`` (None: the signing key), or None when the ring does not hold it."""
        return self.keys[0] if kid is None else self._by_id.get(kid)

    def mac(self, data: bytes, kid: str | None = None) -> str | None:
        key = self.key(kid)
        return None if key is None else hmac.new(key, data, hashlib.sha256).hexdigest()

    def argument_digest(self, name: str, value: Any, kid: str | None = None) -> str | None:
        """The digest of one argument of a call, as call entries record it under ``arguments``
        (``kid``: the key an entry names; None when the ring does not hold it)."""
        return self.mac(_canonical({"name": name, "value": value}), kid)

    def argument_digests(self, arguments: Mapping[str, Any]) -> dict[str, str]:
        return {name: str(self.argument_digest(name, value)) for name, value in arguments.items()}

    def call_digest(self, digest: str) -> str:
        """A call's digest (:func:`mcp_bridge.sealing.call_digest`, a plain SHA-256 that travels in
        the question) keyed for the trail, so it links the entries of one call and reveals nothing."""
        return str(self.mac(b"call\x00" + digest.encode()))


def argument_digest(name: str, value: Any, keys: AuditKeys | None = None) -> str:
    """The digest of one argument under ``keys``' signing key (the public key by default)."""
    return str((keys or AuditKeys()).argument_digest(name, value))


def bounded(text: str | None, values: Iterable[str] = ()) -> str | None:
    """``text`` with each of ``values`` replaced by ``<argument>`` (ignoring case), then cut to
    :data:`RESULT_MAX_CHARS` characters (``bounded_results``)."""
    if text is None:
        return None
    lowered = text.lower()
    for value in sorted({v for v in values if len(v) >= 3}, key=len, reverse=True):
        needle = value.lower()
        start = lowered.find(needle)
        while start >= 0:
            text = text[:start] + "<argument>" + text[start + len(value) :]
            lowered = text.lower()
            start = lowered.find(needle, start + len("<argument>"))
    return text if len(text) <= RESULT_MAX_CHARS else text[: RESULT_MAX_CHARS - 1] + "…"


def _strings(value: Any) -> Iterator[str]:
    """Every scalar inside an argument value, as text (how a message would quote it)."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def argument_values(arguments: Mapping[str, Any]) -> list[str]:
    return [text for value in arguments.values() for text in _strings(value)]


class AuditWriteError(OSError):
    """An entry could not be written to the trail (it was logged). Before a call: do not make it.
    After a call: the call happened; say so, whatever the trail."""


class AuditLog:
    """Appends chained entries to ``path``; ``None`` writes nothing (the observers still see them).

    Each of ``observers`` is called with every entry after it is written. ``to_log`` also copies each
    entry into the ``mcp_bridge.observability.audit`` logger (``not_in_the_log``).
    """

    def __init__(
        self,
        path: str | Path | None,
        *,
        observers: Iterable[AuditObserver] = (),
        keys: AuditKeys | None = None,
        to_log: bool = False,
    ) -> None:
        self.path = Path(path) if path else None
        self.observers = list(observers)
        self.keys = keys or AuditKeys()
        self.to_log = to_log
        self._lock = threading.Lock()
        # (device, inode, size) of the file after this process's last write, and that entry's MAC:
        # while the file is unchanged, the next entry chains to it without reading the file.
        self._last: tuple[tuple[int, int, int], str] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._check_mode()

    @classmethod
    def from_settings(cls, settings: Settings, *, observers: Iterable[AuditObserver] = ()) -> AuditLog:
        """The trail the environment names: AUDIT_LOG (var/audit.jsonl; empty: none), AUDIT_KEY,
        AUDIT_EXTRA_KEYS, AUDIT_TO_LOG."""
        keys = AuditKeys.from_settings(settings)
        path = settings.audit_log
        if path and not keys.configured:
            log.warning(
                "AUDIT_KEY is not set: the audit trail's digests and chain use a public key, so they "
                "tell accidental damage only, and a short argument can be found from its digest. Set "
                "AUDIT_KEY (at least 32 random bytes, the same on every replica)"
            )
        return cls(path or None, observers=observers, keys=keys, to_log=settings.audit_to_log)

    def _check_mode(self) -> None:
        assert self.path is not None
        try:
            mode = self.path.stat().st_mode
        except FileNotFoundError:
            return
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning(
                "audit trail %s can be read by others than its owner (mode %o): chmod 600 it",
                self.path,
                stat.S_IMODE(mode),
            )

    def record_question(
        self,
        conversation: str,
        question: Question,
        call: AskedCall,
        decision: AuditDecision,
        result: str | None,
        **extra: Any,
    ) -> None:
        """An entry about one call of a question: what was decided about it, and what came of it."""
        self.record(
            conversation=conversation,
            # Who was asked (None: the channel names nobody).
            user=question.user,
            skill=question.skill,
            tool=call.tool,
            source=call.source,
            confirmation=call.id,
            digest=self.keys.call_digest(call.digest),
            decision=decision,
            result=bounded(result, argument_values(call.arguments)),
            **extra,
        )

    def record_calls(
        self, conversation: str, question: Question, decision: AuditDecision, result: str | None
    ) -> None:
        """The same entry about each call of a question, in the question's order."""
        for call in question.calls:
            self.record_question(conversation, question, call, decision, result)

    def record(self, *, decision: AuditDecision | None = None, **entry: Any) -> None:
        """One entry: a ``decision`` (one of :data:`AuditDecision`) and its fields, or an ``event``."""
        if decision is not None:
            entry = {**entry, "decision": decision}
        clash = set(_CHAIN) & set(entry)
        if clash:
            raise ValueError(f"audit entry fields {sorted(clash)} are the chain's own")
        if isinstance(entry.get("result"), str):
            entry["result"] = bounded(entry["result"])
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "pid": os.getpid(), **entry}
        if self.path is not None:
            try:
                with self._lock:
                    entry = self._append(entry)
            except OSError as exc:
                log.error(
                    "audit trail %s could not be written (%s): a %s entry of %s.%s",
                    self.path,
                    exc,
                    entry.get("decision"),
                    entry.get("skill"),
                    entry.get("tool"),
                )
                raise AuditWriteError(f"audit trail {self.path}: {exc}") from exc
        if self.to_log:
            log.info("audit %s", json.dumps(entry, ensure_ascii=False, sort_keys=True))
        for observe in self.observers:
            try:
                observe(entry)
            except Exception:  # an observer's bug must not stop a confirmation
                log.exception("audit observer %r failed", observe)

    def _append(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Write ``entry`` chained to the file's last line, under the file's lock; the entry written."""
        assert self.path is not None
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            before = os.fstat(fd)
            where = (before.st_dev, before.st_ino, before.st_size)
            prev = self._last[1] if self._last is not None and self._last[0] == where else _last_mac(fd)
            chained = {**entry, "kid": self.keys.signing_id, "prev": prev}
            chained["mac"] = str(self.keys.mac(_canonical(chained)))
            data = (json.dumps(chained, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
            os.write(fd, data)
            self._last = ((before.st_dev, before.st_ino, before.st_size + len(data)), chained["mac"])
            return chained
        finally:
            os.close(fd)  # closing releases the lock

    def called(
        self,
        skill: str,
        tool: str,
        source: str,
        arguments: Mapping[str, Any],
        *,
        digest: str,
        conversation: str | None,
        key: str | None,
        result: str,
        sent: bool,
    ) -> None:
        """Record one call of a tool (``decision: "called"``) made in ``conversation``; ``digest`` is the
        call's (:func:`mcp_bridge.sealing.call_digest`), kept under the audit key."""
        self.record(
            conversation=conversation,
            skill=skill,
            tool=tool,
            source=source,
            confirmation=key,
            digest=self.keys.call_digest(digest),
            arguments=self.keys.argument_digests(arguments),
            decision=CALLED,
            result=bounded(result, argument_values(arguments)),
            # False when the request provably never reached the tool (server unreachable, refused).
            sent=sent,
        )

    def entries(self) -> list[dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]


def _last_mac(fd: int) -> str:
    """The MAC of the last complete line of the open file ``fd`` ("" when there is none)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return ""
    start = max(0, size - _TAIL_BYTES)
    tail = os.pread(fd, size - start, start)
    lines = tail.split(b"\n")
    for line in reversed(lines[1:] if start else lines):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            return ""  # a torn last line: verify reports it, the chain goes on from nothing
        return str(entry.get("mac") or "") if isinstance(entry, dict) else ""
    return ""


# -- verification ------------------------------------------------------------------------------


@dataclass
class Verification:
    """What :func:`verify` found: the lines read, the chained ones, and each problem by line."""

    lines: int = 0
    chained: int = 0
    # Lines before the first chained entry (written by a release that did not chain).
    unchained_before: int = 0
    problems: list[str] = field(default_factory=list)
    keys_seen: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(path: str | Path, keys: AuditKeys) -> Verification:
    """Check the chain of the trail at ``path`` with ``keys`` (``chained``): each problem names its line.

    A line edited in place fails its own MAC; a line removed makes the next line's ``prev`` differ
    from the MAC of the line now before it; lines removed from the start make the first line's
    ``prev`` non-empty. Lines written before the trail was chained may lead the file.
    """
    found = Verification()
    previous: str | None = None  # the MAC of the line before (None: no chained line yet)
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            found.lines = number
            if not raw.strip():
                found.problems.append(f"line {number}: empty")
                continue
            try:
                entry = json.loads(raw)
            except ValueError:
                found.problems.append(f"line {number}: not a JSON entry (cut short or edited)")
                previous = ""
                continue
            if not isinstance(entry, dict) or "mac" not in entry:
                if previous is None:
                    found.unchained_before += 1
                else:
                    found.problems.append(f"line {number}: has no MAC, after chained entries (edited)")
                continue
            kid = str(entry.get("kid"))
            found.keys_seen.add(kid)
            body = {name: value for name, value in entry.items() if name != "mac"}
            expected = keys.mac(_canonical(body), kid)
            if expected is None:
                found.problems.append(
                    f"line {number}: signed with key {kid}, which is not among the keys given "
                    "(AUDIT_KEY, AUDIT_EXTRA_KEYS)"
                )
            elif not hmac.compare_digest(expected, str(entry["mac"])):
                found.problems.append(f"line {number}: edited (its MAC does not match what it says)")
            prev = str(entry.get("prev") or "")
            if previous is None and prev:
                found.problems.append(
                    f"line {number}: chained to an entry that is not in the file: lines were removed "
                    "before it"
                )
            elif previous is not None and not hmac.compare_digest(prev, previous):
                found.problems.append(
                    f"line {number}: the entry before it is not the one it was chained to: a line was "
                    f"removed (or moved) between line {number - 1} and line {number}"
                )
            found.chained += 1
            previous = str(entry["mac"])
    return found


def main(argv: list[str]) -> int:
    """``python -m mcp_bridge.observability.audit PATH``: the trail, one line per entry."""
    if len(argv) != 1:
        print("usage: python -m mcp_bridge.observability.audit PATH", file=sys.stderr)
        return 2
    for entry in AuditLog(argv[0]).entries():
        print(
            f"{entry['time']}  {entry.get('conversation') or '-':<24} {entry['skill']}.{entry['tool']:<22} "
            f"{entry['decision']:<12} {entry.get('result') or ''}  digest={entry['digest'][:12]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
