"""`make chat` at a terminal: the README's first command, driven through a pseudo-terminal as a person types.

`scripts/chat.sh` starts the CRM, its MCP server and the action server, then `rasa shell` in the
foreground. Rasa's command line shows a response's buttons as a menu whose first entry Enter picks, and
typed letters never reach a text prompt; so the plugin asks there in words and says what to type
(`utter_type_your_answer`). The person types "yes": the note is saved, once. In a second request they
type "no": nothing is written.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import crm_db, procs

CHAT = procs.REPO_ROOT / "scripts" / "chat.sh"
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r")
DANA = "dana@example.com"


class Terminal:
    """A program on a pseudo-terminal of 50 rows and 160 columns: what it printed (without colours and
    cursor moves), and keys typed into it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=procs.REPO_ROOT,
            start_new_session=True,
        )
        os.close(slave)
        self.screen = ""
        self.read_up_to = 0

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if ready:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the program ended
                chunk = b""
            self.screen += ANSI.sub("", chunk.decode("utf-8", "replace"))

    def expect(self, text: str, timeout: float) -> str:
        """Wait until ``text`` is printed after what earlier calls found; what was printed up to it."""
        deadline = time.monotonic() + timeout
        while text not in self.screen[self.read_up_to :]:
            if time.monotonic() > deadline or self.process.poll() is not None:
                self._read(0.5)
                if text in self.screen[self.read_up_to :]:
                    break
                tail = self.screen[-3000:]
                raise AssertionError(
                    f"{text!r} not printed within {timeout:.0f} s; the terminal shows:\n{tail}"
                )
            self._read(0.5)
        end = self.screen.index(text, self.read_up_to) + len(text)
        seen, self.read_up_to = self.screen[self.read_up_to : end], end
        return seen

    def type(self, line: str) -> None:
        time.sleep(0.3)  # as a person would: after the prompt is drawn
        os.write(self.master, line.encode() + b"\r")

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)  # as Ctrl-C: chat.sh's trap stops the stack
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        os.close(self.master)


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[tuple[Terminal, Path]]:
    var = tmp_path / "var"
    ports = {
        name: str(procs.free_port())
        for name in ("CRM_PORT", "MCP_PORT", "ACTION_SERVER_PORT", "RASA_PORT", "CHAT_PAGE_PORT")
        + ("APPROVAL_PAGE_PORT", "AUTH_PORT")
    }
    env = procs.child_env({"STACK_VAR": str(var), "TERM": "xterm", **ports})
    for name in ("MCP_BRIDGE_DEVELOPMENT", "MCP_BRIDGE_CHANNEL_KEY", "ACTION_SERVER_TOKEN", "PYTHONPATH"):
        env.pop(name, None)
    terminal = Terminal(["bash", str(CHAT)], env)
    try:
        yield terminal, var / "crm.sqlite3"
    finally:
        terminal.close()


@pytest.mark.timeout(600)
def test_a_typed_yes_saves_once_and_a_typed_no_writes_nothing_in_make_chat(
    chat: tuple[Terminal, Path],
) -> None:
    terminal, db = chat
    terminal.expect("Bot loaded", timeout=300)
    dana = crm_db.contact_id(db, DANA)
    before = crm_db.count_notes(db, dana)

    terminal.type(f"log a call with {DANA}")
    terminal.expect("What should the note say?", timeout=60)
    note = f"Dana asked about the VAT rate on invoice {os.getpid()}."
    terminal.type(note)
    asked = terminal.expect('Type "no", "yes"', timeout=60)
    assert f'Save this to Dana Whitfield\'s record? "{note}"' in asked
    assert "Type out your own message" not in asked  # no menu of buttons
    terminal.type("yes")
    terminal.expect("Saved to Dana Whitfield's record.", timeout=60)
    assert len(crm_db.authors_of(db, note)) == 1  # once
    assert crm_db.count_notes(db, dana) == before + 1
    print(terminal.screen)  # the session, for the docs (pytest -s)

    terminal.type(f"log a call with {DANA}")
    terminal.expect("What should the note say?", timeout=60)
    declined = f"Dana will call back about invoice {os.getpid()}."
    terminal.type(declined)
    terminal.expect('Type "no", "yes"', timeout=60)
    terminal.type("no")
    terminal.expect("OK, I won't save it. Nothing was written.", timeout=60)
    assert crm_db.authors_of(db, declined) == []
    assert crm_db.count_notes(db, dana) == before + 1
