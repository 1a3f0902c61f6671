// Command sluice is the Sluice message broker and its tools.
//
//	sluice server [flags]       run the broker
//	sluice bench sqs [flags]    drive an SQS endpoint and report throughput and latency
//	sluice queues [flags]       list queues (through the admin API)
//	sluice dlq <command>        inspect, export, import and redrive dead-letter queues
//	sluice repair --data-dir D  drop records that stop the broker from starting (--dry-run first)
//	sluice definitions …        export and import declared queues, exchanges and bindings
//	sluice cluster <command>    a cluster's status, members (add, remove), and check-stop
//	sluice version              print the version
//
// main only parses flags and calls into internal packages; no broker logic
// lives here.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluicemq/sluice/internal/auth/httpauth"
	"github.com/sluicemq/sluice/internal/auth/password"
	"github.com/sluicemq/sluice/internal/bench"
	"github.com/sluicemq/sluice/internal/buildinfo"
	"github.com/sluicemq/sluice/internal/cli"
	"github.com/sluicemq/sluice/internal/server"
)

// version, commit and date are set at build time with
// -ldflags "-X main.version=v1.2.3 -X main.commit=… -X main.date=…"
// (make build, the Dockerfile and .goreleaser.yaml do). Left empty,
// buildinfo.Read falls back to what the Go toolchain embedded.
var (
	version = "dev"
	commit  = ""
	date    = ""
)

const usage = `Sluice: a durable message broker that speaks the Amazon SQS API and AMQP 0-9-1.

Usage:
  sluice server [flags]       run the broker (sluice server -h for flags)
  sluice bench sqs [flags]    load-test an SQS endpoint (sluice bench sqs -h)
  sluice queues [flags]       list queues with depth, age and dead-letter setup
  sluice dlq <command>        dead-letter queues: list, peek, show, delete, export,
                              import, redrive, tasks, cancel, pause, resume (sluice dlq help)
  sluice definitions export|import  queues, exchanges and bindings as one JSON document
  sluice doctor [flags]       check queue configuration against live metrics; exit 1 on red
  sluice hash-password [--amqp]  read a password on stdin, print a hash for the config file
  sluice repair --data-dir DIR [--dry-run]
                              list (--dry-run) or drop the records that make the broker
                              refuse to start; the broker must be stopped
  sluice cluster status [--endpoint URL]
                              a cluster node's Raft status and where the leader serves
  sluice cluster add|remove|check-stop …
                              change the members; may a node be stopped now?
  sluice version              print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "server":
		return runServer(args[1:], stderr, os.Getenv)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "queues":
		return runCLI(cli.Queues, args[1:], stdout, stderr)
	case "dlq":
		return runCLI(cli.DLQ, args[1:], stdout, stderr)
	case "doctor":
		return runCLI(cli.Doctor, args[1:], stdout, stderr)
	case "definitions":
		return runCLI(cli.Definitions, args[1:], stdout, stderr)
	case "hash-password":
		return runHashPassword(args[1:], os.Stdin, stdout, stderr)
	case "repair":
		return runRepair(args[1:], stdout, stderr)
	case "cluster":
		return runCLI(cli.Cluster, args[1:], stdout, stderr)
	case "version":
		return runVersion(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// AllowNonLoopbackEnv, set to 1 or true, is --allow-non-loopback for
// containers, where adding a flag means repeating the whole command.
const AllowNonLoopbackEnv = "SLUICE_ALLOW_NON_LOOPBACK"

func runServer(args []string, stderr io.Writer, getenv func(string) string) int {
	opts := server.DefaultOptions()
	fs := flag.NewFlagSet("sluice server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "TOML config file (see docs/sluice.example.toml); flags override it")
	dataDir := fs.String("data-dir", opts.DataDir, "directory of the durable store")
	store := fs.String("store", opts.Store, "disk (durable) or memory (nothing survives a restart)")
	sqsListen := fs.String("sqs-listen", opts.SQSListen, "address of the HTTP listener: SQS API, admin API, dashboard, /metrics, /health")
	amqpListen := fs.String("amqp-listen", opts.AMQPListen, "address of the AMQP 0-9-1 listener (\"\" to turn it off)")
	amqpsListen := fs.String("amqps-listen", opts.AMQPSListen, "address of an AMQP-over-TLS listener (needs [tls] in the config)")
	amqpMaxMessageSize := fs.Int("amqp-max-message-size", opts.AMQPMaxMessageSize, "largest AMQP message body in bytes (RabbitMQ 4.x's default; at most 512 MiB)")
	amqpProduct := fs.String("amqp-product", opts.AMQPProduct, "the \"product\" server property AMQP clients see")
	account := fs.String("account-id", opts.AccountID, "12-digit account id used in queue URLs and ARNs")
	region := fs.String("region", opts.Region, "region used in ARNs")
	debugListen := fs.String("debug-listen", "", "loopback address serving Go runtime profiles under /debug/pprof/ (heap, goroutines, CPU; no authentication; default off)")
	ready := fs.String("ready-file", "", "write {\"sqs\":addr,\"amqp\":addr,\"pid\":n} here once listening (with \"amqps\" and \"debug\" when on)")
	logLevel := fs.String("log-level", opts.LogLevel, "debug, info, warn or error")
	logFormat := fs.String("log-format", opts.LogFormat, "text or json")
	nodeID := fs.Uint64("node-id", 0, "cluster mode: this node's id among --peers (the [cluster] section's node_id)")
	raftListen := fs.String("raft-listen", "", "cluster mode: address for Raft traffic from peers (default: this node's address in --peers)")
	peers := fs.String("peers", "", "cluster mode: every member as id=host:port of its Raft listener, comma-separated, e.g. 1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103")
	secretFile := fs.String("cluster-secret-file", "", "cluster mode: file holding the cluster secret (32 bytes or more), the same on every node (the [cluster] section's secret_file)")
	extraSecretFile := fs.String("cluster-extra-secret-file", "", "cluster mode: a second secret this node also accepts from the nodes that dial it, while rotating the secret (the [cluster] section's extra_secret_file)")
	encrypt := fs.Bool("cluster-encrypt", false, "cluster mode: carry the traffic between nodes in TLS (the [cluster] section's encrypt), the same on every node")
	encryptTransition := fs.Bool("cluster-encrypt-transition", false, "cluster mode: accept plain and encrypted links from other nodes while turning --cluster-encrypt on or off in a running cluster (the [cluster] section's encrypt_transition)")
	replication := fs.Int("replication-factor", 0, "cluster mode: how many members vote (the [cluster] section's replication_factor; default 3); the others are standby learners")
	shards := fs.Int("shards", 0, "cluster mode: how many Raft groups the SQS queues are spread over, each with its own leader (the [cluster] section's shards; default 1; fixed at the cluster's first start, the same on every node)")
	placement := fs.String("placement", "", `cluster mode, with shards: "all" (every node holds every shard; the default) or "subset" (each shard above 0 on replication-factor nodes; experimental) (the [cluster] section's placement; fixed at the cluster's first start, the same on every node)`)
	replaceAfter := fs.Duration("replace-after", 0, "cluster mode: replace a voter silent this long with a caught-up learner (the [cluster] section's replace_after; default 30s)")
	snapStreams := fs.Int("snapshot-streams", 0, "cluster mode: snapshots this node sends, and receives, at once over all its shards (the [cluster] section's snapshot_streams; default 2; negative: no bound)")
	snapRate := fs.Int64("snapshot-rate", 0, "cluster mode: bytes a second this node's outgoing snapshots write together (the [cluster] section's snapshot_rate; default 67108864, 64 MiB/s; at least 1048576; negative: no limit)")
	join := fs.Bool("join", false, "cluster mode: this node is being added to a running cluster (the [cluster] section's join); then run `sluice cluster add` for it")
	nonLoopback := fs.Bool("allow-non-loopback", false, "allow listening beyond loopback without credentials configured (env "+AllowNonLoopbackEnv+"=1)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice server: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *config != "" {
		if err := opts.LoadFile(*config); err != nil {
			fmt.Fprintf(stderr, "sluice server: %v\n", err)
			return 2
		}
	}
	switch v := getenv(AllowNonLoopbackEnv); v {
	case "":
	case "1", "true":
		opts.AllowNonLoopback = true
	default:
		fmt.Fprintf(stderr, "sluice server: %s=%q: use 1 or true (or unset it)\n", AllowNonLoopbackEnv, v)
		return 2
	}
	// Flags given on the command line win over the config file.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "data-dir":
			opts.DataDir = *dataDir
		case "store":
			opts.Store = *store
		case "sqs-listen":
			opts.SQSListen = *sqsListen
		case "amqp-listen":
			opts.AMQPListen = *amqpListen
		case "amqps-listen":
			opts.AMQPSListen = *amqpsListen
		case "amqp-max-message-size":
			opts.AMQPMaxMessageSize = *amqpMaxMessageSize
		case "amqp-product":
			opts.AMQPProduct = *amqpProduct
		case "account-id":
			opts.AccountID = *account
		case "region":
			opts.Region = *region
		case "ready-file":
			opts.ReadyFile = *ready
		case "debug-listen":
			opts.DebugListen = *debugListen
		case "log-level":
			opts.LogLevel = *logLevel
		case "log-format":
			opts.LogFormat = *logFormat
		case "allow-non-loopback":
			opts.AllowNonLoopback = *nonLoopback
		case "node-id":
			opts.Cluster.NodeID = *nodeID
		case "raft-listen":
			opts.Cluster.RaftListen = *raftListen
		case "join":
			opts.Cluster.Join = *join
		case "replication-factor":
			opts.Cluster.ReplicationFactor = *replication
		case "replace-after":
			opts.Cluster.SetReplaceAfter(*replaceAfter)
		case "snapshot-streams":
			opts.Cluster.SnapshotStreams = *snapStreams
		case "snapshot-rate":
			opts.Cluster.SnapshotRate = *snapRate
		case "shards":
			opts.Cluster.Shards = *shards
		case "placement":
			opts.Cluster.Placement = *placement
		case "cluster-secret-file":
			opts.Cluster.SecretFile = *secretFile
		case "cluster-extra-secret-file":
			opts.Cluster.ExtraSecretFile = *extraSecretFile
		case "cluster-encrypt":
			opts.Cluster.Encrypt = *encrypt
		case "cluster-encrypt-transition":
			opts.Cluster.EncryptTransition = *encryptTransition
		}
	})
	if *peers != "" {
		ps, err := server.ParsePeers(*peers)
		if err != nil {
			fmt.Fprintf(stderr, "sluice server: --%v\n", err)
			return 2
		}
		opts.Cluster.Peers = ps
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "sluice server: invalid configuration:\n%v\n", err)
		return 2
	}
	opts.Build = buildinfo.Read(version, commit, date)
	log := newLogger(stderr, opts.LogLevel, opts.LogFormat)
	if opts.DebugListen != "" {
		ds, err := server.ListenDebug(opts.DebugListen, log)
		if err != nil {
			fmt.Fprintf(stderr, "sluice server: %v\n", err)
			return 1
		}
		defer func() { _ = ds.Close() }() // the process is exiting
		go func() {
			if err := ds.Serve(); err != nil {
				log.Error("debug listener stopped", "err", err)
			}
		}()
		opts.DebugAddr = ds.Addr()
		log.Info("debug listener serving Go runtime profiles", "addr", ds.Addr(), "path", "/debug/pprof/")
	}
	// The Go heap's soft limit follows the live heap (server/memlimit.go);
	// for the process's life, whichever way it serves.
	go server.RunSoftMemoryLimit(context.Background(), opts, log)
	if opts.Cluster.Enabled() {
		return runClusterNode(opts, log, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Supervise is New then Run, and after a full disk that failed the
	// store, a restart in place once space is back.
	serving := false
	if err := server.Supervise(ctx, opts, log, func(*server.Server) { serving = true }); err != nil {
		if !serving {
			fmt.Fprintf(stderr, "sluice server: %v\n", err)
		} else {
			log.Error("server stopped", "err", err)
		}
		return 1
	}
	return 0
}

// runVersion prints the build's version, commit, build date and Go
// version; --json prints them as an object for scripts.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	info := buildinfo.Read(version, commit, date)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(info); err != nil {
			return 1
		}
		return 0
	}
	fmt.Fprintln(stdout, info)
	return 0
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	ho := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "amqp" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return bench.AMQPCommand(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "sqs" {
		fmt.Fprintln(stderr, "usage: sluice bench sqs [flags]")
		return 2
	}
	var o bench.SQSOptions
	fs := flag.NewFlagSet("sluice bench sqs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.RegisterFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := bench.RunSQS(ctx, o, stdout); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "sluice bench sqs: %v\n", err)
		return 1
	}
	return 0
}

// runHashPassword prints a hash for [http_auth.users] (default) or, with
// --amqp, for [[amqp_users]] password_hash. The password is read from
// standard input (stdin) so it never appears in a process list or shell
// history.
func runHashPassword(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice hash-password", flag.ContinueOnError)
	fs.SetOutput(stderr)
	forAMQP := fs.Bool("amqp", false, "hash for an [[amqp_users]] entry instead of [http_auth.users]")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !*forAMQP {
		if err := httpauth.HashPasswordCommand(stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "sluice hash-password: %v\n", err)
			return 1
		}
		return 0
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		fmt.Fprintf(stderr, "sluice hash-password: no password on standard input (%v)\n", err)
		return 1
	}
	fmt.Fprintln(stdout, password.Hash(line))
	return 0
}
