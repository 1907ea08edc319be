"""The audit trail a security team can use (mcp_bridge.observability.audit): digests keyed under the
deployment's key and rotatable, no copy in the process log unless asked, results bounded and stripped
of argument values, an owner-only file, and a chain that `mcp-bridge audit verify` checks, naming the
line that was edited or follows a removed one."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_bridge.cli.e2e.calls import CallLog
from mcp_bridge.config.settings import Settings
from mcp_bridge.errors import ConfigError
from mcp_bridge.observability.audit import (
    RESULT_MAX_CHARS,
    AuditKeys,
    AuditLog,
    argument_digest,
    verify,
)
from mcp_bridge.sealing import call_digest

KEY = "audit key for the tests, long enough: 7f3a9c"
OLD_KEY = "the previous audit key of the tests: 1b2e8d0c"
NOTE = "Dana asked about the VAT rate on invoice 4471"


def _keys(*values: str) -> AuditKeys:
    return AuditKeys.from_settings(
        Settings.from_env({"AUDIT_KEY": values[0], "AUDIT_EXTRA_KEYS": ",".join(values[1:])})
    )


def _write(path: Path, keys: AuditKeys, count: int = 6) -> list[str]:
    trail = AuditLog(path, keys=keys)
    for n in range(count - 1):
        trail.record(
            conversation="c1", skill="log_interaction", tool="add_timeline_note", decision="asked", n=n
        )
    trail.called(
        "log_interaction",
        "add_timeline_note",
        "mcp:crm",
        {"contact_id": 17, "text": NOTE},
        digest=call_digest(
            "log_interaction", "add_timeline_note", "mcp:crm", {"contact_id": 17, "text": NOTE}
        ),
        conversation="c1",
        key="k1",
        result="ok",
        sent=True,
    )
    return path.read_text().splitlines()


def _cli(path: Path, env_key: str | None = KEY, extra: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDIT_")}
    if env_key:
        env["AUDIT_KEY"] = env_key
    if extra:
        env["AUDIT_EXTRA_KEYS"] = extra
    return subprocess.run(
        [sys.executable, "-m", "mcp_bridge.cli", "audit", "verify", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_argument_digests_are_keyed(tmp_path: Path) -> None:
    lines = _write(tmp_path / "audit.jsonl", _keys(KEY))
    call = json.loads(lines[-1])
    text_digest = call["arguments"]["text"]
    # Not the plain SHA-256 anyone could compute from a guess, nor the digest under another key.
    plain = hashlib.sha256(json.dumps({"name": "text", "value": NOTE}, sort_keys=True).encode()).hexdigest()
    assert text_digest != plain
    assert text_digest != argument_digest("text", NOTE)  # the public key's
    assert text_digest != _keys(OLD_KEY).argument_digest("text", NOTE)
    assert text_digest == _keys(KEY).argument_digest("text", NOTE, call["kid"])
    # The call's digest is keyed too (the question's own digest is a plain SHA-256).
    assert call["digest"] != _keys(OLD_KEY).call_digest("x")
    assert NOTE not in (tmp_path / "audit.jsonl").read_text()


def test_a_rotated_key_still_matches_and_verifies_older_entries(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    _write(path, _keys(OLD_KEY), count=3)
    _write(path, _keys(KEY, OLD_KEY), count=3)  # after the rotation: the old key only verifies
    kids = [json.loads(line)["kid"] for line in path.read_text().splitlines()]
    assert len(set(kids)) == 2
    assert verify(path, _keys(KEY, OLD_KEY)).ok
    without_old = verify(path, _keys(KEY))
    assert not without_old.ok and "line 1: signed with key" in without_old.problems[0]
    # The conversation-test runner matches an argument under whichever key wrote it.
    calls = CallLog(path, _keys(KEY, OLD_KEY)).calls("c1")
    assert [call.mismatches({"text": NOTE}) for call in calls] == [[], []]
    [old, _] = CallLog(path, _keys(KEY)).calls("c1")
    assert old.mismatches({"text": NOTE}) == [
        f"text (written under audit key {old.kid}, which AUDIT_KEY does not hold)"
    ]


def test_a_short_key_is_refused_and_extra_keys_need_a_main_one() -> None:
    with pytest.raises(ConfigError, match="AUDIT_KEY is 5 bytes long, shorter than 32"):
        AuditKeys.from_settings(Settings.from_env({"AUDIT_KEY": "short"}))
    with pytest.raises(ConfigError, match="AUDIT_EXTRA_KEYS is set but AUDIT_KEY is not"):
        AuditKeys.from_settings(Settings.from_env({"AUDIT_EXTRA_KEYS": KEY}))
    assert not AuditKeys.from_settings(Settings.from_env({})).configured


def test_entries_stay_out_of_the_process_log_unless_asked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp_bridge.observability.audit")
    AuditLog(tmp_path / "a.jsonl").record(decision="asked", skill="s", tool="t", marker="entry-one")
    assert "entry-one" not in caplog.text
    AuditLog(tmp_path / "b.jsonl", to_log=True).record(
        decision="asked", skill="s", tool="t", marker="entry-two"
    )
    assert "entry-two" in caplog.text
    trail = AuditLog.from_settings(
        Settings.from_env({"AUDIT_LOG": str(tmp_path / "c.jsonl"), "AUDIT_KEY": KEY})
    )
    trail.record(decision="asked", skill="s", tool="t", marker="entry-three")
    assert "entry-three" not in caplog.text


def test_a_result_is_bounded_and_stripped_of_argument_values(tmp_path: Path) -> None:
    trail = AuditLog(tmp_path / "audit.jsonl", keys=_keys(KEY))
    error = f"error: contact Dana.Whitfield@Example.com not found; note {NOTE!r} kept; " + "x" * 500
    trail.called(
        "s",
        "add_timeline_note",
        "local",
        {"email": "dana.whitfield@example.com", "note": {"text": NOTE}},
        digest=call_digest(
            "s", "add_timeline_note", "local", {"email": "dana.whitfield@example.com", "note": {"text": NOTE}}
        ),
        conversation="c",
        key=None,
        result=error,
        sent=True,
    )
    result = trail.entries()[-1]["result"]
    assert len(result) <= RESULT_MAX_CHARS
    assert result.startswith("error: contact <argument> not found; note '<argument>' kept; xxx")
    assert "whitfield" not in result.lower() and "4471" not in result


def test_the_file_is_created_owner_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "var" / "audit.jsonl"
    AuditLog(path).record(decision="asked", skill="s", tool="t")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loose = tmp_path / "loose.jsonl"
    loose.write_text("")
    loose.chmod(0o644)
    AuditLog(loose)
    assert "can be read by others than its owner (mode 644)" in caplog.text


def test_verify_passes_on_an_untouched_trail_and_names_a_removed_or_edited_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    lines = _write(path, _keys(KEY))
    passed = _cli(path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "6 entries, the chain holds" in passed.stdout

    removed = tmp_path / "removed.jsonl"
    removed.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    failed = _cli(removed)
    assert failed.returncode == 1
    assert "line 3: the entry before it is not the one it was chained to" in failed.stdout

    edited = tmp_path / "edited.jsonl"
    entry = json.loads(lines[4])
    entry["decision"] = "confirmed"
    edited.write_text("\n".join([*lines[:4], json.dumps(entry, sort_keys=True), *lines[5:]]) + "\n")
    failed = _cli(edited)
    assert failed.returncode == 1
    assert failed.stdout.splitlines()[1:] == ["  line 5: edited (its MAC does not match what it says)"]

    headless = tmp_path / "headless.jsonl"
    headless.write_text("\n".join(lines[2:]) + "\n")
    assert "line 1: chained to an entry that is not in the file" in _cli(headless).stdout

    wrong_key = _cli(path, env_key="another key, just as long as the first one")
    assert wrong_key.returncode == 1 and "line 1: signed with key" in wrong_key.stdout
    assert _cli(tmp_path / "missing.jsonl").returncode == 2
    assert "public key" in _cli(path, env_key=None).stderr


def test_entries_from_before_the_chain_may_lead_the_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text(json.dumps({"decision": "asked", "skill": "s", "tool": "t"}) + "\n")
    _write(path, _keys(KEY), count=2)
    found = verify(path, _keys(KEY))
    assert found.ok and found.unchained_before == 1 and found.chained == 2


def _append_many(path: str, count: int) -> None:
    trail = AuditLog(path, keys=_keys(KEY))
    for n in range(count):
        trail.record(decision="asked", skill="s", tool="t", n=n)


def test_workers_appending_to_one_trail_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(str(path), 40)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    found = verify(path, _keys(KEY))
    assert found.chained == 120
    assert found.ok, found.problems[:3]
