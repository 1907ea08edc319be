#!/usr/bin/env bash
# Runs every Rasa test story file of the example bot (examples/crm_bot/tests/test_*.yml) against the
# current model; fails on any miss.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(scripts/model-path.sh)
mkdir -p results
status=0
for stories in examples/crm_bot/tests/test_*.yml; do
  echo "    $stories"
  .venv-rasa/bin/rasa test core --model "$model" --stories "$stories" --fail-on-prediction-errors \
    --out results/core >results/rasa-test.log 2>&1 || { status=1; tail -40 results/rasa-test.log; }
  grep -E "Correct:|Finished evaluation|stories" results/rasa-test.log | tail -3 || true
done
exit $status
