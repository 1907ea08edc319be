"""Rewinds (Rasa's ``/back``, ``action_back``, any ``rewind`` or ``undo`` event) bring back nothing the
plugin ended.

A rewind reverts the tracker to before an earlier message, and with it every slot: the
``remembered_permissions`` from before a revocation, the ``pending_confirmation`` or
``pending_elicitation`` of a question already answered and run. Each is still validly sealed (the
seal binds a value to its conversation, not to a moment), so the tracker's slots alone cannot tell a
question still waiting from one brought back.

What survives a rewind is the event list: Rasa sends the action server every event of the
conversation (``EventVerbosity.ALL``), the reverted ones included, followed by the ``rewind`` /
``undo`` events that reverted them. So the latest value the plugin ever set in one of its slots is
the value the slot must still have. When the list holds a rewind and a slot's value differs from that
latest value, the rewind brought the value back:

* a question (``pending_confirmation``, ``pending_elicitation``) is taken as not pending (None), so
  a yes to it runs nothing;
* of the permissions, only those also in the latest value count, so a revoked one stays revoked.

A slot the plugin never set, or cleared (None), holds nothing to bring back. A tracker whose events
hold no rewind is taken as it is (its slots are what its events set).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mcp_bridge.contract import ELICITATION_SLOT, PENDING_SLOT, PERMISSIONS_SLOT

__all__ = ["QUESTION_SLOTS", "REWIND_EVENTS", "unrewound"]

log = logging.getLogger(__name__)

# Rasa's event names for a revert: UserUtteranceReverted ("rewind", what action_back emits) and
# ActionReverted ("undo").
REWIND_EVENTS = frozenset({"rewind", "undo"})
# The slots whose value a rewind must not bring back as a whole.
QUESTION_SLOTS = (PENDING_SLOT, ELICITATION_SLOT)
# A tracker's events are read up to this many (Rasa keeps a conversation's whole history; a value
# past the bound is read as "brought back", which asks again: never a write).
MAX_EVENTS = 100_000


def unrewound(
    slots: Mapping[str, Any], events: Sequence[Any], normalise: Callable[[Any], Any] = lambda value: value
) -> dict[str, Any]:
    """``slots`` with every value of the plugin's slots that a rewind brought back removed; the values
    the events set are compared as ``normalise`` makes them (as the slots were made)."""
    result = dict(slots)
    latest: dict[str, Any] = {}
    rewound = False
    for event in events[:MAX_EVENTS]:
        if not isinstance(event, Mapping):
            continue
        kind = event.get("event")
        if kind in REWIND_EVENTS:
            rewound = True
        elif kind == "slot":
            name = event.get("name")
            if name in QUESTION_SLOTS or name == PERMISSIONS_SLOT:
                latest[str(name)] = event.get("value")
    latest = {name: normalise(value) for name, value in latest.items()}
    if not rewound:
        return result
    for name in QUESTION_SLOTS:
        value = result.get(name)
        if value is not None and value != latest.get(name):
            log.warning("a rewind brought back the slot %s of a question already ended; taken as none", name)
            result[name] = None
    held = result.get(PERMISSIONS_SLOT)
    if isinstance(held, list) and held != latest.get(PERMISSIONS_SLOT):
        still = latest.get(PERMISSIONS_SLOT)
        still_list = still if isinstance(still, list) else []
        kept = [permission for permission in held if permission in still_list]
        if len(kept) < len(held):
            log.warning(
                "a rewind brought back %d withdrawn or undone permission(s); they cover nothing",
                len(held) - len(kept),
            )
        result[PERMISSIONS_SLOT] = kept or None
    return result
