#!/usr/bin/env bash
# A local Ray "cluster" on this machine for chute.ray: a head node plus worker nodes that stand in for
# CPU-only machines (--num-cpus=1 each and the custom resource cpu_node, so that
# RemoteLoader(actor_options={"resources": {"cpu_node": 1}}) places actors only there).
#   scripts/ray_cluster.sh start [workers]   # default 2 workers; waits until every node has joined
#   scripts/ray_cluster.sh stop              # stops the nodes this script started (by their pids), no others
# Then: RAY_ADDRESS=127.0.0.1:6390 RAY_AUTH_MODE=disabled python train.py  (chute.ray's ray.init() connects).
# Every node runs the Python of this environment, with this shell's PYTHONPATH: chute must import there.
# CHUTE_RAY_PORT changes the port (6390).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ray_bin="${CHUTE_VENV:-$here/.venv}/bin/ray"
[ -x "$ray_bin" ] || ray_bin="$(command -v ray || true)"
[ -n "$ray_bin" ] || { echo "ray_cluster: ray is not installed (scripts/setup.sh --dev, or pip install 'chute[ray]')" >&2; exit 2; }
port="${CHUTE_RAY_PORT:-6390}"
address="127.0.0.1:$port"
pids="${TMPDIR:-/tmp}/chute-ray-cluster-$port.pids"
# Loopback only, for tests: no token authentication (Ray 2.60 turns it on by default for `ray start`).
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
common=(--node-ip-address=127.0.0.1 --num-cpus=1 --disable-usage-stats --block)

nodes_up() { "$ray_bin" status --address="$address" 2>/dev/null | grep -c " node_" || true; }

wait_for() {  # wait_for N: until N nodes are active, at most 180 s
  for _ in $(seq 360); do
    [ "$(nodes_up)" -ge "$1" ] && return 0
    sleep 0.5
  done
  echo "ray_cluster: only $(nodes_up) of $1 nodes joined within 180 s" >&2
  return 1
}

case "${1:-}" in
  start)
    workers="${2:-2}"
    [ -e "$pids" ] && { echo "ray_cluster: $pids exists: a cluster on port $port is running (stop it first)" >&2; exit 2; }
    # `ray start --block` stays in the foreground as the node's parent; SIGTERM to it stops the node.
    "$ray_bin" start --head --port="$port" --include-dashboard=false "${common[@]}" >/dev/null 2>&1 &
    echo $! >"$pids"
    wait_for 1
    for _ in $(seq "$workers"); do
      "$ray_bin" start --address="$address" --resources='{"cpu_node": 1}' "${common[@]}" >/dev/null 2>&1 &
      echo $! >>"$pids"
    done
    wait_for $((workers + 1))
    echo "ray_cluster: head and $workers worker nodes at $address (export RAY_ADDRESS=$address)"
    ;;
  stop)
    [ -e "$pids" ] || { echo "ray_cluster: no cluster of this script on port $port"; exit 0; }
    tac "$pids" | while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in $(cat "$pids"); do
      for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    done
    rm -f "$pids"
    # As `ray stop` does: a later plain ray.init() must not try to join the cluster that is gone.
    current="${RAY_TMPDIR:-/tmp}/ray/ray_current_cluster"
    grep -qs ":$port\$" "$current" && rm -f "$current"
    echo "ray_cluster: stopped"
    ;;
  *)
    echo "usage: $0 start [workers] | stop" >&2
    exit 2
    ;;
esac
