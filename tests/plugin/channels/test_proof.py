"""Who sent a message: the channel's signature (mcp_bridge.channels.proof), and the adapter's check.

The channels sign the conversation, the person, the text and the time; the action server's adapter
checks them against the tracker and names a person only when they hold. A forged tracker (any
metadata, any intent) names nobody and is marked unvouched.
"""

from __future__ import annotations

import pytest
from rasa_sdk import Tracker

from mcp_bridge.action_server.adapter import ChannelCheck, turn_from_tracker
from mcp_bridge.channels import USER_KEY
from mcp_bridge.channels.proof import PROOF_KEY, TAG_CHARS, ChannelKeys, Unvouched, Vouched
from mcp_bridge.config.settings import Settings
from mcp_bridge.errors import ConfigError

KEY = "a-channel-key-that-is-long-enough-0123456789"
OTHER = "another-channel-key-long-enough-too-9876543210"


def keys(*values: str) -> ChannelKeys:
    return ChannelKeys.parse(" ".join(values))


def test_a_proof_vouches_for_its_conversation_person_text_and_time() -> None:
    signed = keys(KEY).vouch({"other": 1}, conversation="c1", user="rest:dana", text=" yes ")
    assert signed["other"] == 1 and signed[USER_KEY] == "rest:dana"
    checked = keys(KEY).check(signed, conversation="c1", text="yes")  # Rasa stores the text stripped
    assert isinstance(checked, Vouched) and checked.user == "rest:dana" and checked.said_at > 0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m: m, "of another text"),  # checked against "no" below
        (lambda m: {**m, PROOF_KEY: None}, "no channel signature"),
        (lambda m: {**m, PROOF_KEY: m[PROOF_KEY][:-2] + "AA"}, "does not verify"),
        (lambda m: {**m, PROOF_KEY: "v1.x.y"}, "malformed"),
        (lambda m: {**m, PROOF_KEY: ["v1"]}, "malformed"),
        (lambda m: {**m, PROOF_KEY: "v1." + "a" * 5000}, "malformed"),
        (lambda m: {**m, USER_KEY: "rest:mallory"}, "named apart"),
    ],
)
def test_a_proof_that_does_not_hold_vouches_for_nobody(change: object, reason: str) -> None:
    signed = keys(KEY).vouch(None, conversation="c1", user="rest:dana", text="yes")
    text = "no" if reason == "of another text" else "yes"
    checked = keys(KEY).check(change(signed), conversation="c1", text=text)  # type: ignore[operator]
    assert isinstance(checked, Unvouched) and reason in checked.reason


def test_a_proof_for_another_conversation_or_under_another_key_vouches_for_nobody() -> None:
    signed = keys(KEY).vouch(None, conversation="c1", user="rest:dana", text="yes")
    other_conversation = keys(KEY).check(signed, conversation="c2", text="yes")
    assert isinstance(other_conversation, Unvouched) and "another conversation" in other_conversation.reason
    unknown = keys(OTHER).check(signed, conversation="c1", text="yes")
    assert isinstance(unknown, Unvouched) and "unknown key" in unknown.reason
    # The payload re-signed by whoever lacks the key: the mac no longer matches.
    head, key_id, payload, mac = signed[PROOF_KEY].split(".")
    forged = keys(OTHER).vouch(None, conversation="c1", user="rest:mallory", text="yes")[PROOF_KEY]
    mixed = {**signed, PROOF_KEY: ".".join([head, key_id, forged.split(".")[2], mac])}
    assert isinstance(keys(KEY).check(mixed, conversation="c1", text="yes"), Unvouched)


def test_keys_rotate_the_first_signs_every_one_verifies() -> None:
    old = keys(KEY).vouch(None, conversation="c1", user="rest:dana", text="yes")
    rotating = keys(OTHER, KEY)
    assert isinstance(rotating.check(old, conversation="c1", text="yes"), Vouched)
    new = rotating.vouch(None, conversation="c1", user="rest:dana", text="yes")
    assert isinstance(keys(OTHER).check(new, conversation="c1", text="yes"), Vouched)
    assert isinstance(keys(KEY).check(new, conversation="c1", text="yes"), Unvouched)


def test_a_short_key_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError, match="shorter than 32") as refused:
        ChannelKeys.parse("short-key")
    assert "short-key" not in str(refused.value)


@pytest.mark.parametrize(
    "placeholder",
    ["replace-me-with-a-long-random-value-please", "change-this-channel-key-before-you-deploy", "x" * 40],
)
def test_a_long_placeholder_key_is_refused_without_echoing_it(placeholder: str) -> None:
    with pytest.raises(ValueError, match="looks like a placeholder") as refused:
        ChannelKeys.parse(f"{KEY} {placeholder}")
    assert "key 2" in str(refused.value) and placeholder not in str(refused.value)


def test_the_action_server_needs_the_key_unless_in_development() -> None:
    with pytest.raises(ConfigError, match="MCP_BRIDGE_CHANNEL_KEY is not set"):
        ChannelCheck.from_settings(Settings.from_env({}))
    with pytest.raises(ConfigError, match="MCP_BRIDGE_CHANNEL_KEY: key 1 is 5 characters"):
        ChannelCheck.from_settings(Settings.from_env({"MCP_BRIDGE_CHANNEL_KEY": "short"}))
    development = ChannelCheck.from_settings(Settings.from_env({"MCP_BRIDGE_DEVELOPMENT": "1"}))
    assert development.keys is None and development.allow_unsigned
    strict = ChannelCheck.from_settings(Settings.from_env({"MCP_BRIDGE_CHANNEL_KEY": KEY}))
    assert strict.keys is not None and not strict.allow_unsigned


def tracker(metadata: object, text: str = "yes", sender: str = "c1") -> Tracker:
    latest = {"text": text, "intent": {"name": "affirm", "confidence": 1.0}, "metadata": metadata}
    return Tracker.from_dict({"sender_id": sender, "latest_message": latest})


def test_the_turn_names_only_the_person_the_channel_signed() -> None:
    check = ChannelCheck(keys(KEY))
    signed = keys(KEY).vouch(None, conversation="c1", user="socketio:alice", text="yes")
    turn = turn_from_tracker(tracker(signed), check)
    assert (turn.user, turn.unvouched) == ("socketio:alice", None) and turn.said_at is not None
    # The person's name alone, as a forged tracker or Rasa's API would give it: nobody.
    forged = turn_from_tracker(tracker({USER_KEY: "socketio:alice"}), check)
    assert forged.user is None and forged.said_at is None and forged.unvouched == "no channel signature"
    # The signature of another message (its text) or conversation: nobody.
    assert turn_from_tracker(tracker(signed, text="no"), check).unvouched is not None
    assert turn_from_tracker(tracker(signed, sender="c2"), check).user is None
    assert turn_from_tracker(tracker(None), check).unvouched == "no channel signature"


def test_in_development_an_unsigned_message_is_from_nobody_and_a_bad_signature_still_refused() -> None:
    check = ChannelCheck(keys(KEY), allow_unsigned=True)
    plain = turn_from_tracker(tracker({USER_KEY: "socketio:alice"}), check)
    assert plain.user is None and plain.unvouched is None
    signed = keys(OTHER).vouch(None, conversation="c1", user="socketio:alice", text="yes")
    assert turn_from_tracker(tracker(signed), check).unvouched is not None
    without_key = ChannelCheck(None, allow_unsigned=True)
    assert turn_from_tracker(tracker(signed), without_key).unvouched is not None


def test_a_tag_binds_its_parts_under_the_keys_and_rotates_with_them() -> None:
    tag = keys(KEY).tag("button", "slack_T1_C1_U1", "/affirm")
    assert len(tag) == TAG_CHARS and keys(KEY).tag_holds(tag, "button", "slack_T1_C1_U1", "/affirm")
    # Another conversation, another payload, another purpose, another key: the tag does not hold.
    assert not keys(KEY).tag_holds(tag, "button", "slack_T1_C1_U2", "/affirm")
    assert not keys(KEY).tag_holds(tag, "button", "slack_T1_C1_U1", "/deny")
    assert not keys(KEY).tag_holds(tag, "other", "slack_T1_C1_U1", "/affirm")
    assert not keys(OTHER).tag_holds(tag, "button", "slack_T1_C1_U1", "/affirm")
    # The parts are kept apart: "a" + "b_c" is not "a_b" + "c".
    assert not keys(KEY).tag_holds(keys(KEY).tag("button", "a", "b_c"), "button", "a_b", "c")
    # During a rotation the new first key signs, and a tag under the old one still holds.
    assert keys(OTHER, KEY).tag_holds(tag, "button", "slack_T1_C1_U1", "/affirm")
    assert keys(OTHER).tag_holds(keys(OTHER, KEY).tag("button", "c", "p"), "button", "c", "p")
