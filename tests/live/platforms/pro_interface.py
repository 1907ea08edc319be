"""Rasa Pro 3.21's channel interface, without its licence (its server needs one to start; its channel
code does not): the connectors of a credentials file, made by Rasa Pro's own
``create_input_channels`` and registered by its ``register`` on its Sanic 25, with a recorder in
place of the agent (``app.ctx.agent``, what Rasa Pro's handler hands each message to). The recorder
keeps each message, answers it through the message's output channel with a question's buttons, as
Rasa's processor does, and lists what it heard at ``GET /heard``.

Run with Rasa Pro's Python (tests/live/platforms/test_platforms.py does):
``python tests/live/platforms/pro_interface.py CREDENTIALS PORT``
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rasa.core.channels.channel import UserMessage, register
from rasa.core.config.credentials import CredentialsConfig
from rasa.core.run import create_input_channels
from sanic import Sanic, response
from sanic.request import Request
from sanic.response import HTTPResponse

BUTTONS = [{"title": "No", "payload": "/deny"}, {"title": "Yes", "payload": "/affirm"}]


class Recorder:
    """In place of Rasa Pro's agent: keeps each message and answers it with a question."""

    def __init__(self) -> None:
        self.heard: list[dict[str, Any]] = []

    async def handle_message(self, message: UserMessage) -> None:
        self.heard.append(
            {
                "text": message.text,
                "sender_id": message.sender_id,
                "input_channel": message.input_channel,
                "metadata": message.metadata,
            }
        )
        question = f"Heard {message.text!r}. Save it?"
        await message.output_channel.send_text_with_buttons(message.sender_id, question, BUTTONS)


def main() -> None:
    credentials, port = Path(sys.argv[1]), int(sys.argv[2])
    app = Sanic("rasa_pro_channels")
    recorder = Recorder()
    app.ctx.agent = recorder
    register(create_input_channels(None, CredentialsConfig.load_from_file(credentials)), app, "/webhooks/")

    @app.get("/heard")
    async def heard(_: Request) -> HTTPResponse:
        return response.json(recorder.heard)

    app.run(host="127.0.0.1", port=port, single_process=True, access_log=False, motd=False)


if __name__ == "__main__":
    main()
