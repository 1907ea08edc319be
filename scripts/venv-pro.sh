#!/usr/bin/env bash
# .venv-pro: Rasa Pro's own environment with the plugin, made the way a bot owner who runs actions
# there makes it, in three pip runs (`make setup` runs this; usage: scripts/venv-pro.sh RASA_PRO_VERSION):
#
#  1. rasa-pro alone, into a Python 3.12 venv (the official images' Python), pinned by
#     constraints/venv-pro.txt so that the environment is the same every time;
#  2. the plugin's wheel, built from this checkout, with a plain `pip install <wheel>` and no constraints
#     file, exactly as a user installs it next to Rasa Pro. Then `pip check` must report nothing, mcp
#     must still be Rasa Pro's 1.30, and no package rasa-pro installed may have changed version or gone
#     (pip had to keep them all). If the plugin's range stopped admitting mcp 1.30, pip would replace
#     it with 2.3 here and this step fails;
#  3. the plugin editable, with the example CRM and the test tools, pinned, for the tests
#     (`make pytest-pro`, `make proof-pro`); `pip check` again.
#
# On a clean checkout (CI) step 2 runs in a venv that has only rasa-pro. When .venv-pro exists already
# (constraints/venv-pro.txt or pyproject.toml changed), the plugin is uninstalled first, so step 2
# installs it again into rasa-pro's environment, beside what the earlier runs left there.
set -euo pipefail
version="$1"
venv=.venv-pro
work=var/venv-pro
py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check)
quiet() { grep -v "is ignored: it is neither" || true; }

if [ ! -x "$py" ]; then
  python312=$(scripts/find-python.sh 3.12)
  echo "==> creating $venv (Python 3.12: rasa-pro $version with the plugin)"
  "$python312" -m venv "$venv"
fi

echo "==> $venv, 1 of 3: rasa-pro $version (constraints/venv-pro.txt); the first time a few minutes"
"${pip[@]}" install -q -c constraints/venv-pro.txt "rasa-pro==$version" 2>&1 | quiet
"${pip[@]}" uninstall -q -y rasa-mcp-bridge 2>/dev/null || true

echo "==> $venv, 2 of 3: pip install <the plugin's wheel>, as a user, no constraints file; then pip check"
rm -rf "$work" && mkdir -p "$work/source"
tar -cf - --exclude=__pycache__ mcp_bridge pyproject.toml README.md LICENSE CHANGELOG.md MANIFEST.in \
  | tar -xf - -C "$work/source"
# The checkout's .venv builds it, with the setuptools it pins (nothing downloaded).
.venv/bin/python -m build --no-isolation --wheel --outdir "$work/dist" "$work/source" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/rasa_mcp_bridge-*.whl)
"${pip[@]}" freeze --all | sort >"$work/before.txt"
"${pip[@]}" install -q "$wheel" 2>&1 | quiet
"${pip[@]}" check
"${pip[@]}" freeze --all | sort >"$work/after.txt"
changed=$(comm -23 "$work/before.txt" "$work/after.txt")
if [ -n "$changed" ]; then
  echo "error: installing the wheel changed what Rasa Pro's environment had (before, now in $work/after.txt):" >&2
  echo "$changed" >&2
  exit 1
fi
"$py" -c 'import importlib.metadata as m, sys; v = m.version("mcp"); sys.exit(0 if v.startswith("1.30.") else
  f"error: installing the wheel replaced Rasa Pro'"'"'s mcp 1.30 with {v}")'
echo "    $(basename "$wheel"): pip check clean; mcp $("$py" -c 'import importlib.metadata as m; print(m.version("mcp"))') kept; $(comm -13 "$work/before.txt" "$work/after.txt" | wc -l) package(s) added, none changed"

echo "==> $venv, 3 of 3: the plugin editable, the example CRM and the test tools (constraints/venv-pro.txt)"
# Only the test tools, not the dev extra: its fastmcp needs mcp 2.3.
"${pip[@]}" install -q -c constraints/venv-pro.txt -e '.[example]' \
  pytest pytest-asyncio pytest-timeout pytest-xdist hypothesis 'python-socketio[asyncio-client]' 2>&1 | quiet
"${pip[@]}" check >/dev/null || { "${pip[@]}" check; exit 1; }
"$py" -c 'import importlib.metadata as m, sys; v = m.version("mcp"); sys.exit(0 if v.startswith("1.30.") else
  f"error: {sys.argv[1]} must keep Rasa Pro'"'"'s mcp 1.30, not {v}")' "$venv"
rm -rf build
