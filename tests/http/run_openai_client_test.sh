#!/usr/bin/env bash
# ctest's entry for tests/http/test_openai_client.py: pytest from .venv-test (scripts/python_env.sh
# makes it). A missing environment is a failure, not a skip. BATON_BINARY names the `baton` to test.
set -euo pipefail
root="${BATON_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
python="$root/.venv-test/bin/python"
if [ ! -x "$python" ]; then
  echo "FAILED: $python is missing: run scripts/python_env.sh (scripts/setup.sh runs it)" >&2
  exit 1
fi
exec "$python" -m pytest -q -p no:cacheprovider "$root/tests/http/test_openai_client.py" \
  "$root/tests/http/test_openai_client_gemma.py" "$root/tests/http/test_openai_client_templates.py" "$@"
