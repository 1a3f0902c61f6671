# lib-ports.sh: sourced by the benchmark scripts that start their own
# Sluice processes (bench-shards.sh, bench-remote-amqp.sh,
# bench-repair.sh). Needs python3.

# ports N: N distinct free ports on 127.0.0.1, printed on one line; every
# socket stays bound until all are chosen, so none is picked twice.
ports() {
  python3 -c 'import socket,sys
ss=[socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1",0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}
