"""The development stack's process library: the example bot's services and the engines they run on,
started as real processes on loopback and stopped again.

* :mod:`devstack.services`: one process that is ready when it answers (`ServiceProcess`), and every
  service of the example bot: its CRM (REST API and MCP server), the authorization server, the action
  server, Rasa, the chat page, the approval page, the trace backend;
* :mod:`devstack.engines`: PostgreSQL, Redis and nginx (Debian's), with their data in a folder of ours;
* :mod:`devstack.cluster`: the example bot as a small production deployment (two of each behind nginx);
* :mod:`devstack.chat_page`: the example's chat page server, a program the stack runs.

The commands in scripts/ (`make up`, `make chat`, `make cluster-up`) and the tests (through
tests/support/procs.py) use it; it imports neither. It is not part of the plugin's distribution.
"""
