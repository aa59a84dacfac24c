#!/bin/sh
# Create a Redis Cluster from empty nodes, once.  Safe to run again: when the nodes already form
# a cluster it only waits for that cluster to be healthy.  Runs in the redis:7.0 image (sh,
# redis-cli); docker-compose.cluster.yml mounts this file, and k8s/overlays/dev/redis/ holds a
# copy that tests/deploy/test_deploy.py keeps identical.
#
# Environment:
#   REDIS_NODES       host:port of every node, space-separated; the first third become primaries
#                     when CLUSTER_REPLICAS=1 (redis-cli --cluster create picks them in order)
#   CLUSTER_REPLICAS  replicas per primary (default 1)
#   WAIT_SECONDS      how long to wait for the nodes, then for the cluster (default 180)
#   REDISCLI_AUTH     the nodes' password, when they need one (redis-cli reads it)
set -eu

: "${REDIS_NODES:?set REDIS_NODES to the nodes, e.g. redis-1:6379 redis-2:6379 ...}"
REPLICAS="${CLUSTER_REPLICAS:-1}"
WAIT="${WAIT_SECONDS:-180}"

log() { echo "cluster-init: $*"; }

# cli HOST:PORT ARGS...
cli() {
  node=$1
  shift
  redis-cli --no-auth-warning -h "${node%:*}" -p "${node##*:}" "$@"
}

# field HOST:PORT SECTION NAME: one field of CLUSTER INFO or INFO <section>
field() {
  if [ "$2" = cluster ]; then
    out=$(cli "$1" cluster info 2>/dev/null || true)
  else
    out=$(cli "$1" info "$2" 2>/dev/null || true)
  fi
  printf '%s\n' "$out" | tr -d '\r' | sed -n "s/^$3://p"
}

# 1. Every node answers PING (a cluster-enabled node does before it joins a cluster).
for node in $REDIS_NODES; do
  waited=0
  until [ "$(cli "$node" ping 2>/dev/null || true)" = PONG ]; do
    if [ "$waited" -ge "$WAIT" ]; then
      log "node $node did not answer within ${WAIT}s" >&2
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
done
log "all nodes answer"

# 2. Create the cluster only when no node belongs to one: a node that knows other nodes or has
#    slots is part of an existing cluster, and creating again would fail or, worse, split it.
existing=""
for node in $REDIS_NODES; do
  known=$(field "$node" cluster cluster_known_nodes)
  slots=$(field "$node" cluster cluster_slots_assigned)
  if [ "${known:-1}" -gt 1 ] || [ "${slots:-0}" -gt 0 ]; then
    existing=$node
    break
  fi
done

if [ -n "$existing" ]; then
  log "a cluster exists already ($existing is in it): not creating"
else
  log "creating the cluster: $REDIS_NODES, $REPLICAS replica(s) per primary"
  # shellcheck disable=SC2086  # one argument per node
  redis-cli --no-auth-warning --cluster create $REDIS_NODES \
    --cluster-replicas "$REPLICAS" --cluster-yes
fi

# 3. Wait until every node says cluster_state:ok, the nodes agree on the slots, and every
#    primary that serves slots has its replicas attached and acking (min-replicas-to-write
#    refuses writes until they are).
has_slots() {
  # CLUSTER NODES: the "myself" line lists slot ranges after its eighth field
  # shellcheck disable=SC2046  # split the line into fields
  set -- $(cli "$1" cluster nodes 2>/dev/null | grep myself || true)
  [ "$#" -gt 8 ]
}

first=${REDIS_NODES%% *}
waited=0
while :; do
  healthy=yes
  for node in $REDIS_NODES; do
    if [ "$(field "$node" cluster cluster_state)" != ok ]; then
      healthy=no
    elif [ "$(field "$node" replication role)" = master ] && has_slots "$node"; then
      # with min-replicas-to-write, only replicas that acked within min-replicas-max-lag count
      replicas=$(field "$node" replication min_slaves_good_slaves)
      [ -n "$replicas" ] || replicas=$(field "$node" replication connected_slaves)
      [ "${replicas:-0}" -ge "$REPLICAS" ] || healthy=no
    fi
  done
  if [ "$healthy" = yes ] \
    && redis-cli --no-auth-warning --cluster check "$first" >/dev/null 2>&1; then
    break
  fi
  if [ "$waited" -ge "$WAIT" ]; then
    log "the cluster is not healthy after ${WAIT}s:" >&2
    redis-cli --no-auth-warning --cluster check "$first" >&2 || true
    exit 1
  fi
  sleep 1
  waited=$((waited + 1))
done
log "cluster_state:ok on every node, replicas attached"
