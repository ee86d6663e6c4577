#!/usr/bin/env bash
# Makes .venv-test, the Python environment of the tests that drive baton with Python clients
# (tests/http/test_openai_client.py: the official `openai` package, pytest), from the pinned
# tests/http/requirements.txt. Idempotent: nothing is installed again while the requirements are
# unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-test
requirements=tests/http/requirements.txt
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "python_env: creating $venv" >&2
  python3 -m venv "$venv"
fi
echo "python_env: installing $requirements into $venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  -r "$requirements" >&2
echo "$want" > "$stamp"
