"""The one codec (mcp_bridge/sealing.py): a record opens only as the kind it was sealed as, only for
its conversation, only unchanged, and only with a key of the ring; rotation keeps records open."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mcp_bridge.action_server.adapter import whole_numbers
from mcp_bridge.config.settings import Settings
from mcp_bridge.sealing import ENVELOPE_VERSION, Seal

RECORD = {"skill": "notes", "arguments": {"contact_id": 7, "text": "héllo \ud800"}, "asked_at": 1733.25}


def test_a_sealed_record_opens_as_it_was_and_says_its_kind_version_and_key() -> None:
    seal = Seal(b"k" * 32)
    sealed = seal.seal("question", RECORD, "c1")
    assert sealed["v"] == ENVELOPE_VERSION and sealed["kind"] == "question"
    assert len(sealed["kid"]) == 8 and len(sealed["mac"]) == 64
    assert seal.open("question", sealed, "c1") == RECORD


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(skill="other"),
        lambda r: r["arguments"].update(text="wire 10,000 EUR"),
        lambda r: r.update(asked_at=r["asked_at"] + 1),
        lambda r: r.update(extra="added"),
        lambda r: r.pop("skill"),
        lambda r: r.update(kind="permission"),
        lambda r: r.update(v=3),
        lambda r: r.update(kid="00000000"),
        lambda r: r.update(mac="0" * 64),
        lambda r: r.pop("mac"),
    ],
)
def test_any_change_to_a_sealed_record_and_it_does_not_open(change: Any) -> None:
    seal = Seal(b"k" * 32)
    sealed = seal.seal("question", RECORD, "c1")
    changed = copy.deepcopy(sealed)
    change(changed)
    assert seal.open("question", changed, "c1") is None


def test_a_record_opens_only_as_its_kind_and_in_its_conversation() -> None:
    seal = Seal(b"k" * 32)
    sealed = seal.seal("permission", RECORD, "c1")
    assert seal.open("question", sealed, "c1") is None
    assert seal.open("permission", sealed, "c2") is None
    assert seal.open("permission", "not a record", "c1") is None
    assert Seal(b"another key" * 3).open("permission", sealed, "c1") is None


def test_numbers_open_alike_whether_the_tracker_gives_them_back_as_ints_or_doubles() -> None:
    """Over gRPC every number comes back a double, and the Rasa adapter reads an integral one as int."""
    seal = Seal(b"k" * 32)
    sealed = seal.seal("question", {"step": 1, "asked_at": 1000.0, "ids": [1, 2]}, "c1")
    as_doubles = {**sealed, "v": 2.0, "step": 1.0, "asked_at": 1000.0, "ids": [1.0, 2.0]}
    assert seal.open("question", as_doubles, "c1") is not None
    assert seal.open("question", whole_numbers(as_doubles), "c1") is not None


def test_rotation_the_first_key_seals_every_key_opens() -> None:
    old, new = b"the old secret, still in the ring", b"the new secret, sealing from now on"
    before = Seal(old).seal("question", RECORD, "c1")
    ring = Seal(new, old)
    assert ring.open("question", before, "c1") == RECORD  # sealed before the rotation: still opens
    after = ring.seal("question", RECORD, "c1")
    assert after["kid"] != before["kid"] and Seal(new).open("question", after, "c1") == RECORD
    assert Seal(old).open("question", after, "c1") is None  # the old key alone cannot open the new
    assert Seal(new).open("question", before, "c1") is None  # dropped from the ring: closed


def test_a_record_cannot_carry_the_envelopes_own_fields() -> None:
    with pytest.raises(ValueError, match="envelope"):
        Seal(b"k" * 32).seal("question", {"mac": "mine"}, "c1")


def test_the_extra_secrets_open_what_they_sealed_and_each_secret_must_be_strong() -> None:
    from mcp_bridge.action_server.build import confirmation_seal
    from mcp_bridge.errors import ConfigError

    old, new = "Zq4-old-but-random-Xw81mT0pLr2sKv9bN3", "Hy7-new and random, with spaces Qe52nD4"
    ring = confirmation_seal(
        Settings.from_env({"CONFIRMATION_SECRET": new, "CONFIRMATION_EXTRA_SECRETS": f" {old} ,"})
    )
    before = Seal(old.encode()).seal("question", RECORD, "c1")
    assert ring.open("question", before, "c1") == RECORD
    assert Seal(new.encode()).open("question", ring.seal("question", RECORD, "c1"), "c1") == RECORD
    with pytest.raises(
        ConfigError, match="secret 2 of CONFIRMATION_EXTRA_SECRETS is 5 bytes long"
    ) as refused:
        confirmation_seal(
            Settings.from_env({"CONFIRMATION_SECRET": new, "CONFIRMATION_EXTRA_SECRETS": f"{old},short"})
        )
    assert new not in str(refused.value) and old not in str(refused.value)
    with pytest.raises(ConfigError, match="CONFIRMATION_SECRET is not"):
        confirmation_seal(Settings.from_env({"CONFIRMATION_EXTRA_SECRETS": old}))
