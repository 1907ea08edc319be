"""Rasa input channels that authenticate the person: optional, for the Rasa server's credentials.yml.

The confirmation's rule is that only the person who was asked may answer. Rasa's own ``rest`` and
``socketio`` channels take the conversation id from the client, so anyone who knows an id can answer
for it. These channels take it from a credential instead, and name who sent each message in the
message's metadata, under :data:`USER_KEY`, signed with the conversation, the text and the time
under a key only the channels and the action servers share (:mod:`mcp_bridge.channels.proof`). The
plugin's Rasa adapter (:func:`mcp_bridge.action_server.adapter.turn_from_tracker`) checks the signature: a
message without a valid one names nobody and answers nothing, so neither a tracker posted to the
action server nor an event appended through Rasa's HTTP API can say yes for the person. The seal
binds a question to the person:

* :class:`mcp_bridge.channels.socketio.SignedSocketIOInput`: socket.io for a web page; a signed token
  (JWT) names the conversation, the page's Origin must be on an allow-list.
* :class:`mcp_bridge.channels.rest.BearerRestInput`: Rasa's REST channel behind a bearer token, for
  tests, operators and server-to-server callers.
* the messaging platforms' connectors, each in place of Rasa's own and checking its platform's proof
  of every request first: :class:`mcp_bridge.channels.slack.SignedSlackInput`,
  :class:`mcp_bridge.channels.botframework.SignedBotFrameworkInput` (Microsoft Teams),
  :class:`mcp_bridge.channels.twilio.SignedTwilioInput` (SMS and WhatsApp),
  :class:`mcp_bridge.channels.telegram.SignedTelegramInput`,
  :class:`mcp_bridge.channels.facebook.SignedMessengerInput`; what they share, and what a connector of
  your own uses the same way, is :mod:`mcp_bridge.channels.platform`.

They run in the *Rasa* server's process, whose environment has Rasa, python-socketio, PyJWT, aiohttp
and Sanic but none of the plugin's dependencies: these modules import nothing else of the plugin but
:mod:`mcp_bridge.config.envsubst` (the ``${VAR}`` expansion endpoints.yml uses too) and
:mod:`mcp_bridge.channels.proof` (the standard library only). Install the plugin
into Rasa's environment without its dependencies (``pip install --no-deps rasa-mcp-bridge``), or
run Rasa from a folder that holds ``mcp_bridge/``.
"""

# The message metadata key the channels set and the adapter reads: "<channel>:<who>", set by the
# channel for every message (whatever a client put there is replaced) and signed with it.
USER_KEY = "mcp_bridge_user"

__all__ = ["USER_KEY"]
