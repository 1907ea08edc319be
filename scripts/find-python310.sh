#!/usr/bin/env bash
# Prints the path of a working Python 3.10 interpreter, or explains what to install.
set -u
for candidate in "${PYTHON310:-}" python3.10; do
  [ -n "$candidate" ] || continue
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then
    command -v "$candidate"; exit 0
  fi
done
# pyenv keeps shims that refuse to run versions that are not selected; use the install directly.
for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*/bin/python3.10 /usr/bin/python3.10 /usr/local/bin/python3.10; do
  if [ -x "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then
    echo "$candidate"; exit 0
  fi
done
cat >&2 <<'MSG'
error: Python 3.10 was not found.
  Rasa 3.6 runs only on Python 3.10 or older, and this project pins 3.10 for both virtual environments.
  Install it, for example with `pyenv install 3.10` or your system's python3.10 package (with venv),
  or point PYTHON310 at an interpreter: make setup PYTHON310=/path/to/python3.10
MSG
exit 1
