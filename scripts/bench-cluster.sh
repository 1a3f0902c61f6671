#!/bin/bash
# bench-cluster.sh: a 3-node cluster on 127.0.0.1 (ports reserved by bind+close), benches through the leader and a follower, and a failover timing.
# Build first: go build -o sluice ./cmd/sluice (or set SLUICE_BIN). Needs python3 and curl.
# The three nodes share the machine's cores with each other and the load tool;
# the Raft ports are reserved by binding port 0 and closing it.
# CLUSTER_FLAGS are added to every node's command line (e.g. --cluster-encrypt
# --cluster-secret-file F); "all nodes' CPU" sums the three processes' user+system time.
set -u
bin="${SLUICE_BIN:-./sluice}"
W="${BENCH_DIR:-/var/tmp/sluice-cluster-bench}"; rm -rf $W; mkdir -p $W
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()'; }
R1=$(port); R2=$(port); R3=$(port)
S1=$(port); S2=$(port); S3=$(port); A1=$(port); A2=$(port); A3=$(port)
PEERS="1=127.0.0.1:$R1,2=127.0.0.1:$R2,3=127.0.0.1:$R3"
start() { # id sqs amqp
  $bin server --node-id $1 --data-dir $W/n$1 --sqs-listen 127.0.0.1:$2 --amqp-listen 127.0.0.1:$3 --peers $PEERS ${CLUSTER_FLAGS:-} > $W/n$1.log 2>&1 &
  echo $! > $W/n$1.pid
}
start 1 $S1 $A1; start 2 $S2 $A2; start 3 $S3 $A3
leader() { for s in $S1 $S2 $S3; do curl -s http://127.0.0.1:$s/sluice/v1/cluster 2>/dev/null; echo; done | python3 -c '
import sys,json
for l in sys.stdin:
    l=l.strip()
    if not l: continue
    try: d=json.loads(l)
    except Exception: continue
    st=d.get("node",d)
    if st.get("leader"): print(st["leader"]); break'; }
for i in $(seq 1 100); do L=$(leader); [ -n "$L" ] && break; sleep 0.2; done
echo "leader: $L"
sqsport() { case $1 in 1) echo $S1;; 2) echo $S2;; 3) echo $S3;; esac; }
F=$(( L % 3 + 1 ))
LP=$(sqsport $L); FP=$(sqsport $F)
LPID=$(cat $W/n$L.pid)
sleep 2
ticks() { t=0; for n in 1 2 3; do set -- $(cut -d' ' -f14,15 /proc/$(cat $W/n$n.pid)/stat); t=$((t+$1+$2)); done; echo $t; }
allcpu() { echo "all nodes' CPU: $(python3 -c "print('%.2f' % (($2-$1)/$(getconf CLK_TCK)))") s"; }
echo "== through the leader (node $L), 4P/4C 20s"
c0=$(ticks)
$bin bench sqs -endpoint http://127.0.0.1:$LP -duration 20s -queue b1 -pid $LPID 2>&1 | grep -E "sent |deleted|latency|server cpu|not the broker|errors|error"
allcpu $c0 $(ticks)
echo "== through a follower (node $F), 4P/4C 20s"
c0=$(ticks)
$bin bench sqs -endpoint http://127.0.0.1:$FP -duration 20s -queue b2 -pid $LPID 2>&1 | grep -E "sent |deleted|latency|server cpu|not the broker|errors|error"
allcpu $c0 $(ticks)
echo "== through the leader, 1P/1C at 1000 msg/s 20s"
$bin bench sqs -endpoint http://127.0.0.1:$LP -duration 20s -queue b3 -producers 1 -consumers 1 -rate 1000 -pid $LPID 2>&1 | grep -E "deleted|latency|server cpu"
echo "== failover: kill -9 the leader (node $L), time until a send through node $F succeeds"
python3 - "$FP" "$LPID" <<'PY'
import sys,time,os,signal,urllib.request,json
port,pid=sys.argv[1],int(sys.argv[2])
url="http://127.0.0.1:%s/"%port
def send():
    body=json.dumps({"QueueUrl":"http://127.0.0.1:%s/000000000000/b3"%port,"MessageBody":"x"}).encode()
    req=urllib.request.Request(url,data=body,headers={"Content-Type":"application/x-amz-json-1.0","X-Amz-Target":"AmazonSQS.SendMessage"})
    try:
        with urllib.request.urlopen(req,timeout=2) as r: return r.status==200
    except Exception: return False
assert send(), "send before the kill failed"
t0=time.monotonic(); os.kill(pid,signal.SIGKILL)
while not send(): time.sleep(0.02)
print("writable again through a survivor %.2f s after kill -9 of the leader"%(time.monotonic()-t0))
PY
for n in 1 2 3; do kill -TERM $(cat $W/n$n.pid) 2>/dev/null; done; sleep 1; rm -rf $W
