package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClusterConfig is the [cluster] section. Without it (node_id 0, no
// peers) Sluice is one node, exactly as before. With it, `sluice server`
// runs as one member of a Raft group (internal/cluster): every node owns
// the public SQS/HTTP and AMQP listeners and hands each connection to the
// current leader, the only node that runs the engine.
//
//	[cluster]
//	node_id = 1
//	raft_listen = "127.0.0.1:7101"
//	peers = [{id = 1, raft = "127.0.0.1:7101"},
//	         {id = 2, raft = "127.0.0.1:7102"},
//	         {id = 3, raft = "127.0.0.1:7103"}]
//	secret_file = "cluster.secret"
//
// Membership can change at runtime (`sluice cluster add/remove`): a node
// being added starts with join = true, joins as a learner and is promoted
// to voter once it has caught up (promote_lag_entries) if the cluster has
// fewer voters than replication_factor (else it stays a standby learner),
// and every node
// then keeps the replicated membership in its data_dir, which wins over
// peers at the next start.
type ClusterConfig struct {
	// NodeID is this node's id among Peers (1 or more; never reused).
	NodeID uint64 `toml:"node_id"`
	// RaftListen is where this node listens for Raft traffic from its
	// peers. "": its own address in Peers. It may differ from that
	// address (e.g. 0.0.0.0:7101 behind an advertised name).
	RaftListen string `toml:"raft_listen"`
	// Peers are the members of the group when it first starts, this node
	// included, each with the address the others dial for its Raft
	// traffic; every founding node lists the same peers. After the first
	// start the membership replicated through Raft (changed by `sluice
	// cluster add/remove`) is kept in data_dir and wins: peers then only
	// supplies addresses it lacks. A joining node (Join) lists itself and
	// the current members it can reach.
	Peers []ClusterPeer `toml:"peers"`
	// Join starts a node that is being added to a running group: it starts
	// with no membership, never campaigns on its own, and waits until an
	// operator runs `sluice cluster add <node_id> <raft address>` against
	// the cluster, then receives the leader's state (a snapshot) and the
	// log after it, as a learner until the leader promotes it. Ignored once the node has joined (its data_dir has
	// the membership).
	Join bool `toml:"join"`
	// LogCompactEntries and LogKeepEntries tune Raft log truncation: a
	// node cuts its log once its applied index is LogCompactEntries past
	// the log's start, keeping the last LogKeepEntries applied entries for
	// followers that lag briefly (one further behind gets a snapshot). 0:
	// the defaults (10,000 and 5,000). LogKeepEntries must be below
	// LogCompactEntries.
	LogCompactEntries uint64 `toml:"log_compact_entries"`
	LogKeepEntries    uint64 `toml:"log_keep_entries"`
	// SnapshotStreams bounds how many snapshot streams this node sends at
	// once, and how many it receives at once, over all its shards: the
	// copies that fill a node added to a shard, or repair one that lost
	// its data or fell too far behind. 0: the default, 2; negative: no
	// bound. SnapshotRate bounds the bytes a second this node's outgoing
	// snapshot streams write together, so that a copy leaves the disks and
	// the network to the clients' load: 0: the default, 64 MiB/s
	// (67108864); negative: no limit; at least 1 MiB/s (1048576).
	SnapshotStreams int   `toml:"snapshot_streams"`
	SnapshotRate    int64 `toml:"snapshot_rate"`
	// SecretFile names a file holding the cluster secret (at least
	// MinClusterSecretSize bytes, a trailing newline not counted), the
	// same on every node. Every connection between nodes (Raft traffic,
	// and the requests and AMQP connections a node forwards to the
	// leader's internal listeners) opens with a handshake that proves both
	// ends hold it (internal/cluster/nodeauth). "": no secret, allowed only
	// while raft_listen is on loopback. A relative path is relative to the
	// working directory. docs/security.md describes what it protects.
	SecretFile string `toml:"secret_file"`
	// ExtraSecretFile names a second secret this node accepts from the
	// nodes that dial it, while it dials with SecretFile's: set during a
	// rotation of the secret, so that nodes holding the old and the new one
	// keep talking (docs/operations.md, "Cluster secret"). It needs
	// SecretFile, and obeys the same rules.
	ExtraSecretFile string `toml:"extra_secret_file"`
	// Encrypt carries every connection between nodes (Raft traffic and
	// snapshots, and the requests and AMQP connections a node forwards to
	// a leader) in TLS 1.3, with the node handshake bound to each TLS
	// session (internal/cluster/nodeauth). No certificate to provide:
	// each node makes a throwaway one, and the secret is what
	// authenticates. Every node must set the same value; a node that
	// differs cannot join the others, and both log why.
	Encrypt bool `toml:"encrypt"`
	// EncryptTransition makes this node's listeners between nodes take
	// plain and encrypted dialers alike, while it dials as Encrypt says:
	// set during the rolling restarts that turn Encrypt on (or off) in a
	// running cluster without an outage (docs/operations.md, "Encrypting
	// the links between nodes"). It delays a plain dialer's handshake by
	// nodeauth.PlainWait (300 ms).
	EncryptTransition bool `toml:"encrypt_transition"`
	// PromoteLagEntries: a node added by `sluice cluster add` joins as a
	// learner (it receives the log but neither votes nor counts in the
	// commit quorum), and the leader promotes it to voter, while the
	// voters are fewer than ReplicationFactor, once its log holds every
	// entry up to the commit index minus this many and it answers the
	// leader. 0: the default (1,000); at most LogKeepEntries
	// is used, so the new voter catches up from the log, not a snapshot.
	PromoteLagEntries uint64 `toml:"promote_lag_entries"`
	// ReplicationFactor is how many members vote and count in the commit
	// quorum: a write is acknowledged once a majority of them has it on
	// disk. The leader keeps exactly this many voters: it promotes a
	// caught-up learner while there are fewer, demotes a voter while there
	// are more, and replaces a voter silent for ReplaceAfter with a
	// caught-up learner. Members beyond it are learners: they receive
	// every write (a full copy), serve clients like any node, and stand by
	// to replace a voter without copying data. 0: the default, 3. The
	// leader's setting rules; give every node the same.
	ReplicationFactor int `toml:"replication_factor"`
	// ReplaceAfter is how long a voter must have been silent (not heard
	// by the leader) before a caught-up learner replaces it. 0: the
	// default, 30s.
	ReplaceAfter duration `toml:"replace_after"`
	// InternalHTTPListen and InternalAMQPListen are where this node's
	// server listens while it leads: the internal listeners the other
	// nodes forward SQS/HTTP requests and relay AMQP connections to,
	// behind the node handshake. "": port 0 of the host of this node's
	// Raft address in Peers (a new port at every leadership, announced to
	// the others through the replicated log). A fixed port is for
	// firewalls and port mappings between the nodes.
	InternalHTTPListen string `toml:"internal_http_listen"`
	InternalAMQPListen string `toml:"internal_amqp_listen"`
	// InternalHTTPAdvertise and InternalAMQPAdvertise are the addresses
	// the other nodes dial for those listeners, when it is not the
	// listener's own (a NAT, a port mapping, a proxy in between). They
	// need the matching listen setting with a fixed port. "": the address
	// the listener bound.
	//
	// With Shards above 1 each shard this node leads has its own internal
	// HTTP listener: a fixed internal_http_listen or internal_http_advertise
	// port P is shard 0's, and shard k's is P+k (ShardInternalAddr). The
	// internal AMQP listener is shard 0's alone (AMQP is served there).
	InternalHTTPAdvertise string `toml:"internal_http_advertise"`
	InternalAMQPAdvertise string `toml:"internal_amqp_advertise"`
	// Shards is how many Raft groups (data shards) the cluster's queues
	// are spread over, each with its own leader, so that the leaders of
	// different queues run on different nodes (docs/adr/0015). It is
	// fixed when the cluster is first started: every node must give the
	// same, and a node refuses to start on a data_dir written with
	// another. 0 or 1: one group, the layout of a cluster without the
	// setting. Above 1 (experimental, README "Spreading SQS queues over
	// leaders"): SQS queues are placed on shards at creation; AMQP is
	// served by shard 0's leader, which reaches the other shards' SQS
	// queues through their leaders; the dashboard's and admin API's lists
	// cover every shard; a membership change changes every shard.
	Shards int `toml:"shards"`
	// Placement is where the shards above 0 live (docs/adr/0016), fixed
	// like Shards when the cluster is first started: PlacementAll ("" is
	// the same), every node holds every shard; PlacementSubset
	// (experimental, with Shards above 1), shard k on ReplicationFactor of
	// the boot peers, so that a node stores and applies only its shards'
	// messages. Nothing moves a shard's members yet: a node added later
	// holds shard 0 alone, and a removed node's shards keep one copy
	// fewer.
	Placement string `toml:"placement"`
}

// Placements ([cluster] placement).
const (
	PlacementAll    = "all"
	PlacementSubset = "subset"
)

// SubsetPlacement reports whether the shards above 0 live on a subset of
// the nodes (Placement "subset" with more than one shard).
func (c ClusterConfig) SubsetPlacement() bool {
	return c.Placement == PlacementSubset && c.ShardCount() > 1
}

// MaxShards bounds [cluster] shards.
const MaxShards = 64

// ShardCount is Shards with the default (1) applied.
func (c ClusterConfig) ShardCount() int { return max(c.Shards, 1) }

// Replication factor bounds ([cluster] replication_factor).
const (
	DefaultReplicationFactor = 3
	MaxReplicationFactor     = 9
)

// SetReplaceAfter sets ReplaceAfter (a command-line flag).
func (c *ClusterConfig) SetReplaceAfter(d time.Duration) { c.ReplaceAfter = duration(d) }

// Factor is ReplicationFactor with the default applied.
func (c ClusterConfig) Factor() int {
	if c.ReplicationFactor == 0 {
		return DefaultReplicationFactor
	}
	return c.ReplicationFactor
}

// FactorWarning is a warning for a replication factor that buys less
// than it seems to, "" for any other: an even factor keeps a shard
// writable with as few voters down as the odd one below it (a majority
// of 2 is 2, of 4 is 3), so 2 keeps a shard writable with none down (a
// node down stops its writes and its repair), and 4 stores one copy
// more than 3 for no more failures tolerated. It is a warning, not a
// refusal: a factor of 2 (or 4) is still a copy more on disk.
func (c ClusterConfig) FactorWarning() string {
	f := c.Factor()
	if f%2 != 0 {
		return ""
	}
	down := (f - 1) / 2
	if down == 0 {
		return fmt.Sprintf("cluster.replication_factor %d: a shard needs both of its voters to write; one node down stops its shards' writes and their repair (use 3 to stay writable with one down)", f)
	}
	return fmt.Sprintf("cluster.replication_factor %d: a shard stays writable with %d of its voters down, as with %d, for a copy more on disk (use %d, or %d to tolerate %d down)", f, down, f-1, f-1, f+1, down+1)
}

// MinSnapshotRate is the lowest [cluster] snapshot_rate (1 MiB/s; the
// same as raftstore's, which the server package does not import).
const MinSnapshotRate = 1 << 20

// MinClusterSecretSize is the shortest cluster secret a node accepts.
const MinClusterSecretSize = 32

// maxClusterSecretSize bounds the secret file a node reads.
const maxClusterSecretSize = 4096

// LoadSecret reads the cluster secret from SecretFile: nil without one. A
// trailing newline (\n or \r\n) is not part of the secret. It refuses a
// secret shorter than MinClusterSecretSize or longer than 4 KiB. warn is
// set, and the secret still returned, when the file is readable by other
// users of the machine (a warning rather than a refusal: mounted secrets
// are often mode 0644 inside a container of their own).
func (c ClusterConfig) LoadSecret() (secret []byte, warn string, err error) {
	return loadSecret("cluster.secret_file", c.SecretFile)
}

// LoadExtraSecret is LoadSecret for ExtraSecretFile.
func (c ClusterConfig) LoadExtraSecret() (secret []byte, warn string, err error) {
	return loadSecret("cluster.extra_secret_file", c.ExtraSecretFile)
}

func loadSecret(setting, path string) (secret []byte, warn string, err error) {
	if path == "" {
		return nil, "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", setting, err)
	}
	defer func() { _ = f.Close() }() // read-only
	fi, err := f.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", setting, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("%s: %s is not a regular file", setting, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxClusterSecretSize+3))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", setting, err)
	}
	b = []byte(strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"))
	switch {
	case len(b) < MinClusterSecretSize:
		return nil, "", fmt.Errorf("%s: %s holds %d bytes; a cluster secret is at least %d (e.g. head -c 32 /dev/urandom | base64 > %s)", setting, path, len(b), MinClusterSecretSize, path)
	case len(b) > maxClusterSecretSize:
		return nil, "", fmt.Errorf("%s: %s holds more than %d bytes", setting, path, maxClusterSecretSize)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		warn = fmt.Sprintf("%s: %s is readable by every user of this machine (mode %v); chmod 600 it", setting, path, fi.Mode().Perm())
	}
	return b, warn, nil
}

// ClusterPeer is one member of the Raft group.
type ClusterPeer struct {
	ID   uint64 `toml:"id"`
	Raft string `toml:"raft"`
}

// Enabled reports whether the section is present (any field set).
func (c ClusterConfig) Enabled() bool {
	return c.NodeID != 0 || c.RaftListen != "" || len(c.Peers) > 0 || c.Join
}

// Self is this node's entry in Peers (the zero value when it is missing,
// which Validate reports).
func (c ClusterConfig) Self() ClusterPeer {
	for _, p := range c.Peers {
		if p.ID == c.NodeID {
			return p
		}
	}
	return ClusterPeer{}
}

// ParsePeers parses the --peers flag: "1=host:port,2=host:port,...".
func ParsePeers(s string) ([]ClusterPeer, error) {
	var out []ClusterPeer
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		id, addr, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("peers: %q is not id=host:port", f)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("peers: %q: the id is not a number", f)
		}
		out = append(out, ClusterPeer{ID: n, Raft: strings.TrimSpace(addr)})
	}
	return out, nil
}

// validateCluster checks the [cluster] section, and the settings cluster
// mode does not support yet, when the section is present.
func (o *Options) validateCluster() []error {
	c := o.Cluster
	if !c.Enabled() {
		return nil
	}
	var errs []error
	if c.NodeID == 0 {
		errs = append(errs, errors.New("cluster.node_id: must be 1 or more"))
	}
	if len(c.Peers) == 0 {
		errs = append(errs, errors.New("cluster.peers: must list every member, this node included"))
	}
	ids, addrs := map[uint64]bool{}, map[string]bool{}
	self := false
	for _, p := range c.Peers {
		if p.ID == 0 {
			errs = append(errs, fmt.Errorf("cluster.peers: %q has id 0; ids are 1 or more", p.Raft))
		}
		if ids[p.ID] {
			errs = append(errs, fmt.Errorf("cluster.peers: id %d is listed twice", p.ID))
		}
		ids[p.ID] = true
		if _, _, err := net.SplitHostPort(p.Raft); err != nil || strings.HasSuffix(p.Raft, ":0") {
			errs = append(errs, fmt.Errorf("cluster.peers: id %d: raft %q is not host:port with a fixed port", p.ID, p.Raft))
		}
		if addrs[p.Raft] {
			errs = append(errs, fmt.Errorf("cluster.peers: raft address %q is listed twice", p.Raft))
		}
		addrs[p.Raft] = true
		self = self || p.ID == c.NodeID
	}
	if c.NodeID != 0 && len(c.Peers) > 0 && !self {
		errs = append(errs, fmt.Errorf("cluster.node_id: %d is not among cluster.peers", c.NodeID))
	}
	if c.LogCompactEntries != 0 && c.LogKeepEntries >= c.LogCompactEntries {
		// With defaults on one side, raftstore.Open checks the pair.
		errs = append(errs, fmt.Errorf("cluster.log_keep_entries: %d must be below cluster.log_compact_entries (%d)", c.LogKeepEntries, c.LogCompactEntries))
	}
	if c.SnapshotRate > 0 && c.SnapshotRate < MinSnapshotRate {
		errs = append(errs, fmt.Errorf("cluster.snapshot_rate: %d bytes a second is below %d (1 MiB/s; negative: no limit)", c.SnapshotRate, MinSnapshotRate))
	}
	if c.ReplicationFactor < 0 || c.ReplicationFactor > MaxReplicationFactor {
		errs = append(errs, fmt.Errorf("cluster.replication_factor: %d is not between 1 and %d (0: the default, %d)", c.ReplicationFactor, MaxReplicationFactor, DefaultReplicationFactor))
	}
	if c.Shards < 0 || c.Shards > MaxShards {
		errs = append(errs, fmt.Errorf("cluster.shards: %d is not between 1 and %d (0: the default, 1)", c.Shards, MaxShards))
	}
	switch c.Placement {
	case "", PlacementAll:
	case PlacementSubset:
		if c.ShardCount() < 2 {
			errs = append(errs, errors.New(`cluster.placement: "subset" needs cluster.shards above 1`))
		}
	default:
		errs = append(errs, fmt.Errorf(`cluster.placement: %q is not "all" or "subset"`, c.Placement))
	}
	if c.Shards > 1 {
		for _, kv := range [][3]string{{"http_listen", c.InternalHTTPListen, c.InternalAMQPListen}, {"http_advertise", c.InternalHTTPAdvertise, c.InternalAMQPAdvertise}} {
			p := fixedPort(kv[1])
			if p == 0 {
				continue
			}
			if last := p + c.Shards - 1; last > 65535 {
				errs = append(errs, fmt.Errorf("cluster.internal_%s: shard %d's port would be %d, past 65535 (shard k listens on the port plus k)", kv[0], c.Shards-1, last))
			} else if q := fixedPort(kv[2]); q >= p && q <= last {
				errs = append(errs, fmt.Errorf("cluster.internal_%s: the shards' ports %d-%d include the internal AMQP port %d; move one", kv[0], p, last, q))
			}
		}
	}
	if c.ReplaceAfter < 0 || (c.ReplaceAfter > 0 && time.Duration(c.ReplaceAfter) < time.Second) {
		errs = append(errs, fmt.Errorf("cluster.replace_after: %s is below 1s (0: the default, 30s)", time.Duration(c.ReplaceAfter)))
	}
	if c.Join && len(c.Peers) < 2 {
		errs = append(errs, errors.New("cluster.join: a joining node lists itself and at least one current member in cluster.peers"))
	}
	listen := c.RaftListen
	if listen == "" {
		listen = c.Self().Raft
	}
	if _, _, err := c.LoadSecret(); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := c.LoadExtraSecret(); err != nil {
		errs = append(errs, err)
	}
	if c.ExtraSecretFile != "" && c.SecretFile == "" {
		errs = append(errs, errors.New("cluster.extra_secret_file: set only with cluster.secret_file (the secret this node dials with)"))
	}
	if listen != "" {
		host, _, err := net.SplitHostPort(listen)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("cluster.raft_listen: %q is not host:port: %v", listen, err))
		case !isLoopback(host) && c.SecretFile == "":
			// Without a secret whoever reaches the port could write into
			// the log; allow_non_loopback does not lift this.
			errs = append(errs, fmt.Errorf("cluster.raft_listen: %q is not a loopback address and no cluster.secret_file is set; beyond loopback every node must hold the same secret (--cluster-secret-file), so that only nodes can speak Raft to each other. The secret authenticates, it does not encrypt: keep the nodes on a private network (docs/security.md)", listen))
		}
	}
	errs = append(errs, validateInternal("http", c.InternalHTTPListen, c.InternalHTTPAdvertise)...)
	errs = append(errs, validateInternal("amqp", c.InternalAMQPListen, c.InternalAMQPAdvertise)...)
	// The leader's server checks its internal listeners as it checks
	// public ones (checkListen) when it starts; check them here, so that
	// a node refuses to start rather than every leader failing to serve.
	// Beyond loopback the node handshake also needs the secret.
	httpSecured := len(o.SQSCredentials) > 0 && o.HTTPAuth.Options().Enabled()
	for _, l := range []struct {
		kind, listen string
		secured      bool
		how          string
	}{
		{"http", c.InternalHTTPListen, httpSecured, "configure [[sqs_credentials]] and [http_auth]"},
		{"amqp", c.InternalAMQPListen, len(o.AMQPUsers) > 0, "configure [[amqp_users]]"},
	} {
		host, _, err := net.SplitHostPort(l.listen)
		if l.listen == "" || err != nil {
			continue // the default (checked with the Raft address), or reported above
		}
		key := "cluster.internal_" + l.kind + "_listen"
		errs = append(errs, o.checkListen(key, l.listen, true, l.secured, l.how)...)
		if !isLoopback(host) && c.SecretFile == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not a loopback address and no cluster.secret_file is set; the nodes' handshake needs the secret beyond loopback", key, l.listen))
		}
	}
	if o.AMQPListen == "" && o.AMQPSListen == "" && (c.InternalAMQPListen != "" || c.InternalAMQPAdvertise != "") {
		errs = append(errs, errors.New("cluster.internal_amqp_listen, cluster.internal_amqp_advertise: AMQP is off on this node (amqp_listen and amqps_listen are empty)"))
	}
	if o.Store != "disk" {
		errs = append(errs, fmt.Errorf("store: %q is not supported with [cluster]: a cluster node keeps its Raft log and state on disk", o.Store))
	}
	return errs
}

// fixedPort returns the port of host:port addr, 0 when it has none (or
// port 0).
func fixedPort(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(port) // not a number: 0, and validateInternal says why
	return p
}

// ShardInternalAddr returns the internal HTTP address of shard k for the
// configured one, addr (internal_http_listen or internal_http_advertise):
// addr's port plus k. An empty addr, or one on port 0, is returned as it
// is (every shard's listener then takes a port of its own).
func ShardInternalAddr(addr string, k int) string {
	p := fixedPort(addr)
	if p == 0 || k == 0 {
		return addr
	}
	host, _, _ := net.SplitHostPort(addr) // fixedPort parsed it
	return net.JoinHostPort(host, strconv.Itoa(p+k))
}

// validateInternal checks one internal listener's listen and advertise
// settings (kind is http or amqp): host:port each; an advertised address
// needs a fixed listen port, since the port a listener on port 0 gets is
// not known in advance.
func validateInternal(kind, listen, advertise string) []error {
	var errs []error
	fixed := false
	if listen != "" {
		_, port, err := net.SplitHostPort(listen)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster.internal_%s_listen: %q is not host:port: %v", kind, listen, err))
		}
		fixed = err == nil && port != "0"
	}
	if advertise != "" {
		host, port, err := net.SplitHostPort(advertise)
		switch {
		case err != nil || host == "" || port == "0":
			errs = append(errs, fmt.Errorf("cluster.internal_%s_advertise: %q is not host:port with a host and a fixed port", kind, advertise))
		case !fixed:
			errs = append(errs, fmt.Errorf("cluster.internal_%s_advertise: set only with cluster.internal_%s_listen on a fixed port", kind, kind))
		}
	}
	return errs
}
