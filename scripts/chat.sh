#!/usr/bin/env bash
# make chat: CRM, MCP server and action server in the background, rasa shell in the foreground,
# and everything stopped again when the shell ends.
set -euo pipefail
cd "$(dirname "$0")/.."
var=${STACK_VAR:-var}
state=$var/run/chat.json
.venv/bin/python scripts/example_bot.py up --for-shell --state "$state"
trap '.venv/bin/python scripts/example_bot.py down --state "$state" >/dev/null' EXIT
echo "==> opening rasa shell (type /stop to end); try: log a call with dana@example.com"
# Library deprecation warnings (TensorFlow, pkg_resources, SQLAlchemy) are noise to a person chatting.
PYTHONWARNINGS=ignore SQLALCHEMY_SILENCE_UBER_WARNING=1 TF_CPP_MIN_LOG_LEVEL=3 \
  .venv-rasa/bin/python scripts/rasa_quiet.py shell --model "$(scripts/model-path.sh)" --endpoints "$var/run/endpoints.yml" \
  --interface 127.0.0.1 \
  --port "${RASA_PORT:-5005}" --quiet
