#!/usr/bin/env bash
# ctest's entry for the pytest modules of tests/http (the arguments, or the openai client's):
# pytest from .venv-test (scripts/python_env.sh
# makes it). A missing environment is a failure, not a skip. BATON_BINARY names the `baton` to test.
set -euo pipefail
root="${BATON_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
python="$root/.venv-test/bin/python"
if [ ! -x "$python" ]; then
  echo "FAILED: $python is missing: run scripts/python_env.sh (scripts/setup.sh runs it)" >&2
  exit 1
fi
# The test modules: the arguments that name files of tests/http (*.py), or the openai client's;
# the other arguments go to pytest.
modules=()
options=()
for arg in "$@"; do
  case "$arg" in
    *.py) modules+=("$root/tests/http/$arg") ;;
    *) options+=("$arg") ;;
  esac
done
if [ ${#modules[@]} -eq 0 ]; then
  for module in test_openai_client.py test_openai_client_gemma.py test_openai_client_templates.py; do
    modules+=("$root/tests/http/$module")
  done
fi
exec "$python" -m pytest -q -p no:cacheprovider "${modules[@]}" ${options[@]+"${options[@]}"}
