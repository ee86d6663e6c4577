# Shared by the bench/ experiment scripts (source it): start a local cluster with `baton up`,
# wait for the address it prints, stop it. Needs $baton (the binary) and $out (results folder).
#
#   start_cluster NAME CONFIG PREFIX   sets $address to the "PREFIX" line's value ("router: " or
#                                      "http: "); $out/NAME.up.log gets baton up's log
#   start_cluster_cmd NAME PREFIX CMD...  the same with any command that prints those lines and
#                                      stops on SIGTERM (tests/netns/netns_cluster.py: emulated links)
#   stop_cluster                       SIGTERM (drain) and wait; also run on exit

up_pid=""
stop_cluster() {
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  up_pid=""
}
trap stop_cluster EXIT
trap 'exit 130' INT TERM

start_cluster() {
  start_cluster_cmd "$1" "$3" "$baton" up --config "$2"
}

start_cluster_cmd() {
  local name=$1 prefix=$2 up_out="$out/$1.up.out" waited=0
  shift 2
  address=""
  echo "$(basename "$0"): $name: $*" >&2
  : >"$up_out"  # exists before the background process opens it: the loop below reads it
  "$@" >"$up_out" 2>"$out/$name.up.log" &
  up_pid=$!
  while [ -z "$address" ]; do
    address=$(sed -n "s/^$prefix//p" "$up_out" | head -n 1)
    if [ -z "$address" ]; then
      kill -0 "$up_pid" 2>/dev/null || { echo "$name: baton up exited (see $out/$name.up.log)" >&2; return 1; }
      ((waited++ < 1800)) || { echo "$name: no '$prefix' line in 180 s" >&2; return 1; }
      sleep 0.1
    fi
  done
  echo "$(basename "$0"): $name: $address" >&2
}
