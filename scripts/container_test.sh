#!/usr/bin/env bash
# The container test, outside CI (it needs root and downloads a Debian root file system):
#   1. builds the image with only what Debian's archive gives: mmdebstrap makes the base root file
#      system, podman builds deploy/container/Dockerfile on it (--build-arg BASE);
#   2. runs router, prefill and decode as three containers on the host network and asks the router
#      for a chat completion through its OpenAI-compatible HTTP API;
#   3. plays deploy/k8s with `podman kube play` (what of it podman runs: scripts/podman_kube.py
#      says what it changes) and asks again; skipped, with the reason, where podman cannot give
#      pods a network of their own.
# Installs podman, runc and mmdebstrap from Debian's archive if missing. By default the image packs
# this host's build/bin/baton (scripts/build.sh; the Dockerfile's `prebuilt` target);
# --from-source builds it inside the image as a user's `podman build` does (slow: a full build).
# Prints what it does; the containers' logs are kept in build/container-test/.
# Usage: scripts/container_test.sh [--from-source]
set -euo pipefail
cd "$(dirname "$0")/.."

from_source=0
for arg in "$@"; do
  case "$arg" in
    --from-source) from_source=1 ;;
    *) echo "usage: $0 [--from-source]" >&2; exit 2 ;;
  esac
done

readonly BASE_IMAGE=localhost/baton-base:bookworm
readonly IMAGE=localhost/baton:dev
readonly MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
readonly LOGS=build/container-test
readonly NETWORK=baton-ct SUBNET=10.89.77  # podman kube play's pods: one address each
# Debian's podman on these machines: crun refuses the hybrid cgroups and raising limits is not
# permitted, so runc, cgroupfs and limits no higher than the host's (a containers.conf, since
# `podman kube play` takes no --ulimit).
export CONTAINERS_CONF="$PWD/$LOGS/containers.conf"

log() { echo "container-test: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

write_containers_conf() {
  cat >"$CONTAINERS_CONF" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
}

install_tools() {
  local missing=()
  # catatonit: the pause process of podman's pods.
  for p in podman runc catatonit mmdebstrap curl python3-yaml; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [ "$(id -u)" = 0 ] || fail "containers run as root here; run as root to install ${missing[*]}"
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# The base: Debian 12 from the archive, imported as an image (no registry involved).
make_base_image() {
  if podman image exists "$BASE_IMAGE"; then
    log "base image $BASE_IMAGE exists"
    return
  fi
  log "making $BASE_IMAGE with mmdebstrap"
  mmdebstrap --variant=minbase --include=ca-certificates bookworm - \
    | podman import - "$BASE_IMAGE" >/dev/null
}

build_image() {
  local build=(podman build --network host --build-arg "BASE=$BASE_IMAGE"
               -f deploy/container/Dockerfile -t "$IMAGE")
  if ((from_source)); then
    # Behind a TLS-inspecting proxy pip must trust the host's CA bundle: hand it to the build.
    local ca=${PIP_CERT:-${SSL_CERT_FILE:-}}
    [ -z "$ca" ] || build+=(-v "$ca:/run/host-ca.crt:ro" --env PIP_CERT=/run/host-ca.crt)
    log "building $IMAGE from source (scripts/setup.sh and scripts/build.sh in the image)"
    "${build[@]}" . >&2
    return
  fi
  [ -x build/bin/baton ] || fail "no build/bin/baton: run scripts/build.sh (or pass --from-source)"
  [ -f "$MODEL" ] || fail "no $MODEL: run scripts/setup.sh"
  local context
  context=$(mktemp -d)
  mkdir -p "$context/bin" "$context/models"
  cp build/bin/baton "$context/bin/"
  ln "$MODEL" "$context/models/" 2>/dev/null || cp "$MODEL" "$context/models/"
  log "building $IMAGE (target prebuilt) from build/bin/baton"
  "${build[@]}" --target prebuilt "$context" >&2
  rm -rf "$context"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Polls URL until it answers 200, for at most $2 seconds.
wait_for_200() {
  local url=$1 deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null --max-time 5 "$url" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 1
  done
}

# Asks the router at base URL $1, as an OpenAI client would, for the model it lists and a greedy
# chat completion from it, with the token in file $2; prints the answer's text.
ask() {
  python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
base, token = sys.argv[1], open(sys.argv[2]).read().strip()
def call(path, body=None):
    request = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + token,
                                                           "Content-Type": "application/json"},
                                     data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.load(reply)
model = call("/v1/models")["data"][0]["id"]
reply = call("/v1/chat/completions", {
    "model": model, "temperature": 0, "max_tokens": 24,
    "messages": [{"role": "user", "content": "What is the capital of France?"}]})
text = reply["choices"][0]["message"]["content"]
assert text.strip(), f"empty answer: {reply}"
print(f"{model}: {text}")
PY
}

CONTAINERS=()
# Cleanup (also on the exit trap, after a failure part-way): each step removes what may not have
# been made, so none of them failing is an error.
stop_containers() {
  for name in "${CONTAINERS[@]}"; do
    podman logs "$name" >"$LOGS/$name.log" 2>&1 || true
    podman rm -f -t 5 "$name" >/dev/null 2>&1 || true
  done
  CONTAINERS=()
}

# Router, prefill and decode, one container each, on the host network; the shared token from a
# file mounted read-only (never on a command line).
run_three_containers() {
  local token_dir router_port http_port
  token_dir=$(mktemp -d)
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_dir/token"
  chmod 0444 "$token_dir/token"
  router_port=$(free_port) http_port=$(free_port)
  local common=(run -d --network host -v "$token_dir/token:/etc/baton/token:ro"
                --read-only --tmpfs /tmp)
  podman "${common[@]}" --name baton-ct-router "$IMAGE" router --port "$router_port" \
    --http-port "$http_port" --token-file /etc/baton/token >/dev/null
  CONTAINERS+=(baton-ct-router)
  for role in prefill decode; do
    podman "${common[@]}" --name "baton-ct-$role" "$IMAGE" worker --role "$role" \
      --port "$(free_port)" --router "127.0.0.1:$router_port" --token-file /etc/baton/token \
      --threads 1 --kv-cache-memory 128M >/dev/null
    CONTAINERS+=("baton-ct-$role")
  done
  log "router :$router_port (HTTP :$http_port), prefill and decode started; waiting for /health"
  wait_for_200 "http://127.0.0.1:$http_port/health" 120 ||
    fail "the router did not report healthy workers within 120 s (logs in $LOGS)"
  local answer
  answer=$(ask "http://127.0.0.1:$http_port" "$token_dir/token") ||
    fail "no answer through the containers"
  log "answer through three containers: $answer"
  podman ps --filter name=baton-ct- --format '{{.Names}} {{.Status}}' >&2
  stop_containers
  rm -rf "$token_dir"
}

# podman's secret baton-token for the pods' secret volume (a Kubernetes Secret object, as podman
# wants it) and, in file $1, the token the pods read from it: podman 4.3 mounts the value still
# base64-encoded, so that text is the token.
make_token_secret() {
  local secret
  secret=$(mktemp)
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | base64 -w0 >"$1"
  printf 'apiVersion: v1\nkind: Secret\nmetadata: {name: baton-token}\ndata: {token: %s}\n' \
    "$(cat "$1")" >"$secret"
  podman secret rm baton-token >/dev/null 2>&1 || true  # absent unless an earlier run left it
  podman secret create baton-token "$secret" >/dev/null
  rm -f "$secret"
}

readonly ROUTER_IPS=("$SUBNET.10" "$SUBNET.11")
KUBE_FILES=()

# Plays deploy/k8s/$1.yaml (adapted by scripts/podman_kube.py) with its pods at addresses $2...
play() {
  local component=$1; shift
  local adapt=(python3 scripts/podman_kube.py "deploy/k8s/$component.yaml" --image "$IMAGE")
  if [ "$component" != router ]; then
    adapt+=(--pod-ip "$1")
    for ip in "${ROUTER_IPS[@]}"; do adapt+=(--router-ip "$ip"); done
  fi
  local file="$LOGS/kube-$component.yaml" ips=()
  for ip in "$@"; do ips+=(--ip "$ip"); done
  "${adapt[@]}" >"$file"
  KUBE_FILES+=("$file")
  podman kube play --network "$NETWORK" "${ips[@]}" "$file" >/dev/null
}

# Cleanup as stop_containers: each step removes what may not have been made.
stop_kube() {
  for name in $(podman ps -a --filter name='^baton-.*-pod-' --format '{{.Names}}'); do
    podman logs "$name" >"$LOGS/$name.log" 2>&1 || true
  done
  for file in "${KUBE_FILES[@]}"; do podman kube down "$file" >/dev/null 2>&1 || true; done
  KUBE_FILES=()
  podman secret rm baton-token >/dev/null 2>&1 || true
  podman volume rm -f baton-model baton-token >/dev/null 2>&1 || true
  podman network rm -f "$NETWORK" >/dev/null 2>&1 || true
}

# deploy/k8s under `podman kube play`: two router pods, a prefill and a decode pod, each with its
# own address on $NETWORK; the workers register with both routers through the headless Service's
# name. Asks each router, then stops one and asks the other again. Skipped, saying why, where
# podman cannot give pods addresses of their own (no bridge network here).
play_manifests() {
  local why
  if ! podman network exists "$NETWORK" &&
     ! why=$(podman network create --subnet "$SUBNET.0/24" "$NETWORK" 2>&1 >/dev/null); then
    log "SKIPPED podman kube play: podman cannot make a bridge network here: $why"
    return
  fi
  local token="$LOGS/token"
  make_token_secret "$token"
  play router "${ROUTER_IPS[@]}"
  play prefill "$SUBNET.20"
  play decode "$SUBNET.30"
  log "played deploy/k8s: routers at ${ROUTER_IPS[*]}, prefill at $SUBNET.20, decode at $SUBNET.30"
  for ip in "${ROUTER_IPS[@]}"; do
    wait_for_200 "http://$ip:8000/health" 120 ||
      fail "router $ip did not report healthy workers within 120 s (logs in $LOGS)"
  done
  for name in baton-router-pod-0-router baton-prefill-pod-0-prefill baton-decode-pod-0-decode; do
    [ "$(podman exec "$name" id -u)" = 10001 ] || fail "$name does not run as uid 10001"
    ! podman exec "$name" touch /opt/baton/written 2>/dev/null ||
      fail "$name can write its root file system"
  done
  log "every pod runs as uid 10001 on a read-only root file system"
  local answer
  for ip in "${ROUTER_IPS[@]}"; do
    answer=$(ask "http://$ip:8000" "$token") || fail "no answer through router $ip"
    log "answer through router pod $ip: $answer"
  done
  podman pod kill baton-router-pod-0 >/dev/null
  answer=$(ask "http://${ROUTER_IPS[1]}:8000" "$token") ||
    fail "no answer through ${ROUTER_IPS[1]} once the other router was killed"
  log "answer through ${ROUTER_IPS[1]} with the other router killed: $answer"
  podman ps -a --filter name='^baton-.*-pod-' --format '{{.Names}} {{.Status}}' >&2
  rm -f "$token"
  stop_kube
}

mkdir -p "$LOGS"
write_containers_conf
trap 'stop_containers; stop_kube' EXIT
install_tools
make_base_image
build_image
run_three_containers
play_manifests
log "passed"
