#!/usr/bin/env bash
# Makes .venv-traces: the trace backend the tracing proof sends its spans to and the docs' trace
# screenshot shows, Arize Phoenix from PyPI (an OpenTelemetry backend with a web UI that takes OTLP
# over gRPC, as Jaeger and the OpenTelemetry Collector do: neither is on a registry reachable here).
# Its own venv, pinned by constraints/venv-traces.txt: it shares nothing with the plugin's.
# About a minute and 0.8 GB the first time; nothing when it is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-traces
PHOENIX_VERSION=$(sed -n 's/^arize-phoenix==//p' constraints/venv-traces.txt)
if [ -x "$VENV/bin/phoenix" ] && [ "$VENV/.installed" -nt constraints/venv-traces.txt ]; then
    exit 0
fi
PYBIN=$(scripts/find-python.sh 3.13 3.12) || exit 1
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV (the trace backend: Arize Phoenix $PHOENIX_VERSION)"
    "$PYBIN" -m venv "$VENV"
fi
echo "==> installing arize-phoenix $PHOENIX_VERSION into $VENV (constraints/venv-traces.txt)"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints/venv-traces.txt \
    "arize-phoenix==$PHOENIX_VERSION" 2>&1 | grep -v "is ignored: it is neither" || true
"$VENV/bin/python" -m pip check >/dev/null || { "$VENV/bin/python" -m pip check; exit 1; }
[ -x "$VENV/bin/phoenix" ] || { echo "error: phoenix did not install into $VENV" >&2; exit 1; }
touch "$VENV/.installed"
