package server

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func clusterOptions(c ClusterConfig) Options {
	o := DefaultOptions()
	o.Cluster = c
	return o
}

var threePeers = []ClusterPeer{{1, "127.0.0.1:7101"}, {2, "127.0.0.1:7102"}, {3, "127.0.0.1:7103"}}

// TestClusterValidate: a good [cluster] section passes; each mistake is
// reported with the setting it concerns.
func TestClusterValidate(t *testing.T) {
	if err := (&Options{}).validateCluster(); err != nil {
		t.Fatalf("no [cluster]: %v", err)
	}
	good := clusterOptions(ClusterConfig{NodeID: 2, Peers: threePeers})
	if err := good.Validate(); err != nil {
		t.Fatalf("good config refused: %v", err)
	}
	if f := good.Cluster.Factor(); f != 3 {
		t.Fatalf("default replication factor %d, want 3", f)
	}
	for _, tc := range []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"no node id", func(o *Options) { o.Cluster.NodeID = 0 }, "cluster.node_id: must be 1 or more"},
		{"node not a peer", func(o *Options) { o.Cluster.NodeID = 4 }, "cluster.node_id: 4 is not among cluster.peers"},
		{"no peers", func(o *Options) { o.Cluster.Peers = nil }, "cluster.peers: must list every member"},
		{"duplicate id", func(o *Options) {
			o.Cluster.Peers = []ClusterPeer{{1, "127.0.0.1:1"}, {2, "127.0.0.1:2"}, {2, "127.0.0.1:3"}}
		}, "id 2 is listed twice"},
		{"duplicate address", func(o *Options) { o.Cluster.Peers = []ClusterPeer{{1, "127.0.0.1:1"}, {2, "127.0.0.1:1"}} }, `raft address "127.0.0.1:1" is listed twice`},
		{"id zero", func(o *Options) { o.Cluster.Peers = append(o.Cluster.Peers, ClusterPeer{0, "127.0.0.1:9"}) }, "has id 0"},
		{"bad address", func(o *Options) { o.Cluster.Peers[0].Raft = "nowhere" }, `raft "nowhere" is not host:port`},
		{"port 0", func(o *Options) { o.Cluster.Peers[0].Raft = "127.0.0.1:0" }, "with a fixed port"},
		{"raft beyond loopback", func(o *Options) { o.Cluster.RaftListen = "0.0.0.0:7102" }, "cluster.raft_listen: \"0.0.0.0:7102\" is not a loopback address and no cluster.secret_file is set"},
		{"raft beyond loopback, allow_non_loopback alone", func(o *Options) { o.Cluster.RaftListen, o.AllowNonLoopback = "0.0.0.0:7102", true }, "no cluster.secret_file is set"},
		{"missing secret file", func(o *Options) { o.Cluster.SecretFile = "/nonexistent/secret" }, "cluster.secret_file: open /nonexistent/secret"},
		{"missing extra secret file", func(o *Options) {
			o.Cluster.SecretFile, o.Cluster.ExtraSecretFile = writeSecret(t, strings.Repeat("s", 32), 0o600), "/nonexistent/extra"
		}, "cluster.extra_secret_file: open /nonexistent/extra"},
		{"extra secret alone", func(o *Options) { o.Cluster.ExtraSecretFile = writeSecret(t, strings.Repeat("s", 32), 0o600) }, "cluster.extra_secret_file: set only with cluster.secret_file"},
		{"memory store", func(o *Options) { o.Store = "memory" }, `store: "memory" is not supported with [cluster]`},
		{"replication factor too large", func(o *Options) { o.Cluster.ReplicationFactor = 10 }, "cluster.replication_factor: 10 is not between 1 and 9"},
		{"negative replication factor", func(o *Options) { o.Cluster.ReplicationFactor = -1 }, "cluster.replication_factor: -1 is not between 1 and 9"},
		{"snapshot rate below 1 MiB/s", func(o *Options) { o.Cluster.SnapshotRate = 1000 }, "cluster.snapshot_rate: 1000 bytes a second is below 1048576"},
		{"replace_after below a second", func(o *Options) { o.Cluster.SetReplaceAfter(500 * time.Millisecond) }, "cluster.replace_after: 500ms is below 1s"},
		{"amqps without tls", func(o *Options) { o.AMQPSListen = "127.0.0.1:5671" }, "amqps_listen: needs [tls] cert and key"},
		{"keep not below compact", func(o *Options) { o.Cluster.LogCompactEntries, o.Cluster.LogKeepEntries = 100, 100 }, "cluster.log_keep_entries: 100 must be below cluster.log_compact_entries (100)"},
		{"internal listen not host:port", func(o *Options) { o.Cluster.InternalHTTPListen = "7201" }, `cluster.internal_http_listen: "7201" is not host:port`},
		{"advertise without a fixed port", func(o *Options) { o.Cluster.InternalHTTPAdvertise = "10.0.0.2:7201" }, "cluster.internal_http_advertise: set only with cluster.internal_http_listen on a fixed port"},
		{"advertise with listen on port 0", func(o *Options) {
			o.Cluster.InternalAMQPListen, o.Cluster.InternalAMQPAdvertise = "127.0.0.1:0", "10.0.0.2:7202"
		}, "cluster.internal_amqp_advertise: set only with cluster.internal_amqp_listen on a fixed port"},
		{"advertise port 0", func(o *Options) {
			o.Cluster.InternalHTTPListen, o.Cluster.InternalHTTPAdvertise = "127.0.0.1:7201", "10.0.0.2:0"
		}, `cluster.internal_http_advertise: "10.0.0.2:0" is not host:port with a host and a fixed port`},
		{"internal listener beyond loopback without a secret", func(o *Options) {
			o.Cluster.InternalHTTPListen, o.AllowNonLoopback = "0.0.0.0:7201", true
		}, "cluster.internal_http_listen: \"0.0.0.0:7201\" is not a loopback address and no cluster.secret_file is set"},
		{"internal listener beyond loopback without credentials", func(o *Options) {
			o.Cluster.SecretFile, o.Cluster.InternalAMQPListen = writeSecret(t, strings.Repeat("s", 32), 0o600), "0.0.0.0:7202"
		}, "cluster.internal_amqp_listen: \"0.0.0.0:7202\" is not a loopback address and no credentials are configured"},
		{"internal amqp without amqp", func(o *Options) { o.AMQPListen, o.Cluster.InternalAMQPListen = "", "127.0.0.1:7202" }, "AMQP is off on this node"},
		{"join alone", func(o *Options) { o.Cluster.Join, o.Cluster.Peers = true, threePeers[1:2] }, "cluster.join: a joining node lists itself and at least one current member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := clusterOptions(ClusterConfig{NodeID: 2, Peers: append([]ClusterPeer(nil), threePeers...)})
			tc.edit(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if o := clusterOptions(ClusterConfig{NodeID: 4, Join: true, Peers: append([]ClusterPeer{{4, "127.0.0.1:7104"}}, threePeers...)}); o.Validate() != nil {
		t.Fatalf("joining node refused: %v", o.Validate())
	}
	fixed := clusterOptions(ClusterConfig{NodeID: 2, Peers: threePeers,
		InternalHTTPListen: "127.0.0.1:7201", InternalHTTPAdvertise: "127.0.0.1:17201",
		InternalAMQPListen: "127.0.0.1:7202", InternalAMQPAdvertise: "127.0.0.1:17202"})
	if err := fixed.Validate(); err != nil {
		t.Fatalf("fixed internal listeners refused: %v", err)
	}
	wide := clusterOptions(ClusterConfig{NodeID: 2, Peers: threePeers, SecretFile: writeSecret(t, strings.Repeat("s", 32), 0o600),
		InternalHTTPListen: "0.0.0.0:7201", InternalAMQPListen: "0.0.0.0:7202"})
	wide.AllowNonLoopback = true
	if err := wide.Validate(); err != nil {
		t.Fatalf("internal listeners beyond loopback with a secret and allow_non_loopback refused: %v", err)
	}
	o := clusterOptions(ClusterConfig{NodeID: 2, RaftListen: "0.0.0.0:7102", Peers: threePeers, SecretFile: writeSecret(t, strings.Repeat("s", 32)+"\n", 0o600)})
	if err := o.Validate(); err != nil {
		t.Fatalf("raft beyond loopback with a secret: %v", err)
	}
}

func writeSecret(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

// TestClusterSecretFile: a trailing newline is not part of the secret; a
// short one is refused with the setting's name; a world-readable file
// loads with a warning.
func TestClusterSecretFile(t *testing.T) {
	s32 := strings.Repeat("a", 32)
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string // the secret; "" for a refusal
		warn          bool
	}{
		{"exact", s32, 0o600, s32, false},
		{"newline", s32 + "\n", 0o600, s32, false},
		{"crlf", s32 + "\r\n", 0o400, s32, false},
		{"short", strings.Repeat("a", 31) + "\n", 0o600, "", false},
		{"empty", "", 0o600, "", false},
		{"too long", strings.Repeat("a", 5000), 0o600, "", false},
		{"world-readable", s32, 0o644, s32, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ClusterConfig{SecretFile: writeSecret(t, tc.content, tc.mode)}
			got, warn, err := c.LoadSecret()
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "cluster.secret_file") {
					t.Fatalf("got %q, %v; want a cluster.secret_file error", got, err)
				}
				return
			}
			if err != nil || string(got) != tc.want || (warn != "") != tc.warn {
				t.Fatalf("got %q, warn %q, %v", got, warn, err)
			}
		})
	}
	if got, warn, err := (ClusterConfig{}).LoadSecret(); got != nil || warn != "" || err != nil {
		t.Fatalf("no secret_file: %q %q %v", got, warn, err)
	}
}

// TestClusterConfigFile: the [cluster] section of the README's example
// (and tuning keys) loads into ClusterConfig.
func TestClusterConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node1.toml")
	if err := os.WriteFile(path, []byte(`
data_dir = "./node1"
[cluster]
node_id = 1
raft_listen = "127.0.0.1:7101"
peers = [{id = 1, raft = "127.0.0.1:7101"}, {id = 2, raft = "127.0.0.1:7102"}, {id = 3, raft = "127.0.0.1:7103"}]
promote_lag_entries = 50
replication_factor = 5
replace_after = "45s"
snapshot_streams = 4
snapshot_rate = 33554432
internal_http_listen = "127.0.0.1:7201"
internal_http_advertise = "127.0.0.1:17201"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	if err := o.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	want := ClusterConfig{NodeID: 1, RaftListen: "127.0.0.1:7101", Peers: threePeers, PromoteLagEntries: 50,
		ReplicationFactor: 5, ReplaceAfter: duration(45 * time.Second), SnapshotStreams: 4, SnapshotRate: 32 << 20,
		InternalHTTPListen: "127.0.0.1:7201", InternalHTTPAdvertise: "127.0.0.1:17201"}
	if !reflect.DeepEqual(o.Cluster, want) || o.Validate() != nil {
		t.Fatalf("got %+v (%v), want %+v", o.Cluster, o.Validate(), want)
	}
	if o.Cluster.Self() != threePeers[0] {
		t.Fatalf("Self = %+v", o.Cluster.Self())
	}
}

func TestParsePeers(t *testing.T) {
	got, err := ParsePeers("1=127.0.0.1:7101, 2=127.0.0.1:7102,3=127.0.0.1:7103")
	if err != nil || !reflect.DeepEqual(got, threePeers) {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, bad := range []string{"1:127.0.0.1:7101", "x=127.0.0.1:7101"} {
		if _, err := ParsePeers(bad); err == nil {
			t.Errorf("ParsePeers(%q) accepted", bad)
		}
	}
}

// FuzzParsePeers: --peers never panics, and what it accepts round-trips:
// printing the peers back and parsing again gives the same list.
func FuzzParsePeers(f *testing.F) {
	for _, s := range []string{"1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103", "", ",,", "1=", "=x", "18446744073709551616=a:1", " 2 = [::1]:7102 ", "1=a=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		peers, err := ParsePeers(s)
		if err != nil {
			return
		}
		var parts []string
		for _, p := range peers {
			parts = append(parts, strconv.FormatUint(p.ID, 10)+"="+p.Raft)
		}
		again, err := ParsePeers(strings.Join(parts, ","))
		if err != nil || (len(peers) > 0 || len(again) > 0) && !reflect.DeepEqual(again, peers) {
			t.Fatalf("%q parsed to %+v, which reparses to %+v, %v", s, peers, again, err)
		}
	})
}

func TestFactorWarning(t *testing.T) {
	for _, tc := range []struct {
		factor int
		want   string // a part of the warning; "" for none
	}{
		{0, ""}, {1, ""}, {3, ""}, {5, ""}, {9, ""},
		{2, "one node down stops its shards' writes"},
		{4, "writable with 1 of its voters down, as with 3"},
		{6, "writable with 2 of its voters down, as with 5"},
	} {
		got := ClusterConfig{ReplicationFactor: tc.factor}.FactorWarning()
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("factor %d: warning %q, want one with %q", tc.factor, got, tc.want)
		}
	}
}
