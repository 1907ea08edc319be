"""`rasa ...` with the HTTP API's token from RASA_AUTH_TOKEN instead of the command line.

    RASA_AUTH_TOKEN=... .venv-rasa/bin/python scripts/rasa_run.py run --enable-api ...

Rasa takes its token only as `--auth-token`, and a process's arguments are readable by every user
of the machine (`ps`, /proc). This passes it to Rasa's own command line parser inside the process,
so it never appears there; it refuses to start without one, which would leave the API open.
Run with the Rasa venv's Python.
"""

import os
import sys

token = os.environ.pop("RASA_AUTH_TOKEN", "").strip()
if not token:
    sys.exit("rasa_run.py: RASA_AUTH_TOKEN is not set; Rasa's HTTP API would answer anyone who reaches it")
if "--auth-token" in sys.argv:
    sys.exit("rasa_run.py: give the token in RASA_AUTH_TOKEN, not as --auth-token")

from rasa.__main__ import main  # noqa: E402  (imported once the token is safe)

# One argument: a token that starts with "-" (token_urlsafe makes one in 64) would otherwise be read
# as an option and Rasa would refuse to start ("--auth-token: expected one argument").
sys.argv = ["rasa", *sys.argv[1:], f"--auth-token={token}"]
main()
