#!/usr/bin/env bash
# Prints models/<digest>.tar.gz, where digest covers everything Rasa trains from.
set -euo pipefail
cd "$(dirname "$0")/.."
digest=$(cat config.yml domain.yml $(find data -name '*.yml' | sort) constraints/venv-rasa.txt | sha256sum | cut -c1-16)
echo "models/crm-$digest.tar.gz"
