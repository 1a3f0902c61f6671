# lib-rabbitmq.sh: sourced by the scripts that compare Sluice with RabbitMQ
# (bench-vs-rabbitmq.sh, bench-quorum.sh). Needs BENCH_DIR and RMQ_SERVER
# set. It defines freeport, wait_port, start_rmq/stop_rmq/rmqctl, and an
# EXIT trap that stops RabbitMQ and its epmd, then runs the caller's
# cleanup_more (if defined).

freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }

# wait_port PORT: poll until something accepts on 127.0.0.1:PORT (60 s).
wait_port() {
  for _ in $(seq 600); do
    if python3 -c "import socket,sys;socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2; return 1
}

rmq_pid=""
rmq3_pids=()
RMQ_NODE="bench$$@localhost"
EPMD_PORT=$(freeport)
rmq_cleanup() {
  [ -n "$rmq_pid" ] && kill "$rmq_pid" 2>/dev/null || true
  for p in "${rmq3_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if declare -F cleanup_more >/dev/null; then cleanup_more; fi
  /usr/lib/erlang/bin/epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1 || true
}
trap rmq_cleanup EXIT

# start_rmq: RabbitMQ in its own directories under $BENCH_DIR/rmq (the
# Debian package's service start is denied in containers), on free ports;
# sets URL (its AMQP endpoint) and PID (its beam process).
start_rmq() {
  local d="$BENCH_DIR/rmq" port dist
  rm -rf "$d" && mkdir -p "$d"
  port=$(freeport) dist=$(freeport)
  echo '[].' > "$d/enabled_plugins" && : > "$d/rabbitmq.conf"
  HOME="$d" RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
    RABBITMQ_NODENAME="$RMQ_NODE" RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$dist" \
    ERL_EPMD_PORT="$EPMD_PORT" RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq" setsid "$RMQ_SERVER" > "$d/out.log" 2>&1 &
  wait_port "$port"
  rmq_pid=$(pgrep -f "beam.smp.*-home $d " | head -1)
  URL="amqp://guest:guest@127.0.0.1:$port/" PID="$rmq_pid"
}
stop_rmq() { kill "$rmq_pid"; while kill -0 "$rmq_pid" 2>/dev/null; do sleep 0.1; done; rmq_pid=""; }

# rmqctl ARGS...: rabbitmqctl against the node start_rmq started.
rmqctl() {
  local d="$BENCH_DIR/rmq"
  HOME="$d" ERL_EPMD_PORT="$EPMD_PORT" RABBITMQ_CONFIG_FILE="$d/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    /usr/lib/rabbitmq/bin/rabbitmqctl -q -n "$RMQ_NODE" "$@"
}

# start_rmq3: three RabbitMQ nodes on this machine, clustered (nodes 2 and 3
# join node 1), each in its own directories under $BENCH_DIR/rmq3/nN with
# free ports and one shared Erlang cookie; sets URL (node 1's AMQP
# endpoint, where the bench declares its queue, so node 1 leads it), PID
# (node 1's beam process) and RMQ3_PIDS (all three).
start_rmq3() {
  local base="$BENCH_DIR/rmq3" i d port dist cookie
  rm -rf "$base" && mkdir -p "$base"
  cookie="SLUICEBENCH$$$(date +%s)"
  rmq3_pids=() RMQ3_PORTS=()
  for i in 1 2 3; do
    d="$base/n$i"; mkdir -p "$d"
    port=$(freeport) dist=$(freeport)
    RMQ3_PORTS+=("$port")
    echo '[].' > "$d/enabled_plugins" && : > "$d/rabbitmq.conf"
    printf '%s' "$cookie" > "$d/.erlang.cookie" && chmod 400 "$d/.erlang.cookie"
    HOME="$d" RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
      RABBITMQ_NODENAME="bench$$-$i@localhost" RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$dist" \
      ERL_EPMD_PORT="$EPMD_PORT" RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
      RABBITMQ_CONFIG_FILE="$d/rabbitmq" setsid "$RMQ_SERVER" > "$d/out.log" 2>&1 &
  done
  for i in 1 2 3; do
    wait_port "${RMQ3_PORTS[$((i - 1))]}"
    rmq3_pids+=("$(pgrep -f "beam.smp.*-home $base/n$i " | head -1)")
  done
  for i in 2 3; do
    rmq3ctl "$i" stop_app
    rmq3ctl "$i" join_cluster "bench$$-1@localhost"
    rmq3ctl "$i" start_app
  done
  wait_port "${RMQ3_PORTS[1]}" && wait_port "${RMQ3_PORTS[2]}"
  URL="amqp://guest:guest@127.0.0.1:${RMQ3_PORTS[0]}/" PID="${rmq3_pids[0]}"
}
stop_rmq3() {
  local p
  for p in "${rmq3_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${rmq3_pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done
  rmq3_pids=()
}

# rmq3ctl N ARGS...: rabbitmqctl against node N of start_rmq3's cluster.
rmq3ctl() {
  local i=$1 d="$BENCH_DIR/rmq3/n$1"; shift
  HOME="$d" ERL_EPMD_PORT="$EPMD_PORT" RABBITMQ_CONFIG_FILE="$d/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    /usr/lib/rabbitmq/bin/rabbitmqctl -q -n "bench$$-$i@localhost" "$@"
}
