#!/usr/bin/env bash
# Prints the path of a working interpreter of one of the Python versions asked for (in order of
# preference), or explains what to install.  Usage: scripts/find-python.sh 3.13 [3.12 ...]
# Looked for where a user expects it: PYTHON<version without dot> (e.g. PYTHON313), then
# python3.X on PATH, then pyenv's installs, then /usr/bin and /usr/local/bin.
set -u
[ $# -ge 1 ] || { echo "usage: $0 VERSION [VERSION ...]" >&2; exit 2; }
works() {  # $1 interpreter, $2 version: it runs, is that version, and can make a venv
  "$1" -c "import sys, venv, ensurepip; assert '%d.%d' % sys.version_info[:2] == '$2'" 2>/dev/null
}
for version in "$@"; do
  var="PYTHON${version//./}"
  for candidate in "${!var:-}" "python$version"; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 && works "$candidate" "$version"; then
      command -v "$candidate"; exit 0
    fi
  done
  # pyenv keeps shims that refuse to run versions that are not selected; use the install directly.
  for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version"*/bin/python"$version" \
      /usr/bin/python"$version" /usr/local/bin/python"$version"; do
    if [ -x "$candidate" ] && works "$candidate" "$version"; then
      echo "$candidate"; exit 0
    fi
  done
done
first="$1"
{
  echo "error: no Python $(echo "$@" | sed 's/ / or /g') was found (with venv and ensurepip)."
  case "$first" in
    3.10) echo "  Rasa 3.6 runs only on Python 3.10, and the oldest action server this plugin supports";
          echo "  (rasa-sdk 3.6) is tested on it." ;;
    *)    echo "  The action server's environment follows what bot owners run today: rasa-sdk 3.21 on";
          echo "  Python $first." ;;
  esac
  echo "  Install it with \`pyenv install $first\`, or your system's packages (Debian/Ubuntu:"
  echo "  \`apt-get install python$first python$first-venv\`), or point PYTHON${first//./} at an"
  echo "  interpreter: make setup PYTHON${first//./}=/path/to/python$first"
} >&2
exit 1
