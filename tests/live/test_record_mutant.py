"""The record's attack cases (tests/live/browser/test_record.py) fail with the record's checks switched off.

A copy of ``mcp_bridge/`` in which the action server takes the tracker's word again, as it did before it
kept a record: the open question is the tracker's slot (:func:`read_state`), a question ends however often
it is answered and a message answers and starts as much as it likes (:class:`Record`), a withdrawn
permission still stands, and a run under a permission may write what the person did not send. The action
server of the live cases runs that copy (it comes first on ``PYTHONPATH``); every case must then fail,
writing what the person never confirmed (or, for the yes used twice, answering it again). So the cases
test the record, not something beside it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import procs

pytestmark = pytest.mark.timeout(900)
PACKAGE = procs.REPO_ROOT / "mcp_bridge"
CASES = procs.REPO_ROOT / "tests" / "live" / "browser" / "test_record.py"

ENDS = (
    '        this call ended it, else why not (it had ended already, or the message answered another)."""\n'
)
STARTS = (
    "    async def _start(self, tx: Tx, conversation_id: str, message: Message, what: str, now: float) "
    "-> None:\n"
)
# (file, the code as it is, the code with the record's check switched off)
SWITCHED_OFF = [
    (
        "confirmation/state.py",
        "    stored = await record.open_question(turn.conversation_id)\n",
        "    stored = None  # MUTANT: the record is not asked which question is open\n"
        "    question = open_question(turn.slots.get(PENDING_SLOT), seal, turn.conversation_id)\n"
        "    if isinstance(question, Question):\n"
        "        return Asking(question, left_behind)\n",
    ),
    (
        "record/store.py",
        ENDS,
        ENDS + "        return None  # MUTANT: ends however often it is answered\n",
    ),
    (
        "record/store.py",
        '        """What the message started already (a question or a run), or None."""\n',
        '        """What the message started already (a question or a run), or None."""\n'
        "        return None  # MUTANT: a message that started something may start more\n",
    ),
    (
        "record/store.py",
        STARTS,
        STARTS + "        return  # MUTANT: a message starts as much as it likes\n",
    ),
    (
        "record/store.py",
        "AND state = 'granted' AND expires_at > ? ORDER BY granted_at",
        "AND expires_at > ? ORDER BY granted_at",  # MUTANT: withdrawn permissions stand
    ),
    (
        "record/store.py",
        '        None when the permission still stands and the message started nothing yet."""\n',
        '        None when the permission still stands and the message started nothing yet."""\n'
        "        return None  # MUTANT: a permission is used as often as asked\n",
    ),
    (
        "confirmation/permitted.py",
        '    slot or a result must be in the text of the signed message that started the run."""\n',
        '    slot or a result must be in the text of the signed message that started the run."""\n'
        "    return None  # MUTANT: a run under a permission writes whatever the slots say\n",
    ),
]


def switched_off(target: Path) -> Path:
    """A copy of mcp_bridge/ under ``target`` with the record's checks switched off."""
    copy = target / "mcp_bridge"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, code, mutant in SWITCHED_OFF:
        path = copy / name
        text = path.read_text()
        assert text.count(code) == 1, f"{name}: the code to switch off is not there once; has it changed?"
        path.write_text(text.replace(code, mutant))
    return target


def test_every_case_fails_with_the_records_checks_switched_off(tmp_path: Path) -> None:
    root = switched_off(tmp_path / "mutant")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", str(CASES)],
        cwd=procs.REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=800,
    )
    failed = set(re.findall(r"^FAILED \S+::(test_\w+(?:\[\w+\])?)", done.stdout, re.M))
    cases = {
        "test_1_a_later_yes_into_an_earlier_refused_question_writes_nothing",
        "test_2_a_yes_used_twice_writes_once",
        "test_3_a_question_nobody_saw_sealed_with_the_secret_writes_nothing",
        "test_4_a_relabelled_goodbye_writes_nothing_the_person_did_not_type[withdrawn]",
        "test_4_a_relabelled_goodbye_writes_nothing_the_person_did_not_type[standing]",
        "test_10_a_second_question_from_one_signed_message_asks_nothing",
    }
    assert failed == cases, done.stdout[-6000:]
