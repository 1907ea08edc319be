#!/usr/bin/env bash
# Prints models/<digest>.tar.gz, where digest covers everything Rasa trains the example bot from.
set -euo pipefail
cd "$(dirname "$0")/.."
bot=examples/crm_bot
digest=$(cat $bot/config.yml $bot/domain.yml $(find $bot/data -name '*.yml' | sort) constraints/venv-rasa.txt | sha256sum | cut -c1-16)
echo "models/crm-$digest.tar.gz"
