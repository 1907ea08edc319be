#!/usr/bin/env bash
# Trains the Rasa model only when domain, config or training data changed: the model file is named
# after a digest of exactly those files, so an existing file is the up-to-date model.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(scripts/model-path.sh)
if [ -f "$model" ]; then
  echo "==> model is up to date: $model"
  exit 0
fi
echo "==> training the Rasa model (domain, config or data changed); this takes about a minute"
mkdir -p models var
start=$(date +%s)
bot=examples/crm_bot
.venv-rasa/bin/rasa train --quiet --fixed-model-name "$(basename "$model" .tar.gz)" --out models \
  --config $bot/config.yml --domain $bot/domain.yml --data $bot/data >var/train.log 2>&1 \
  || { cat var/train.log; echo "error: rasa train failed"; exit 1; }

echo "==> trained $model in $(( $(date +%s) - start )) s"
