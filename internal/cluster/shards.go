package cluster

// Queues spread over shards ([cluster] shards above 1; ADR 0015 step 3,
// docs/adr/0015-shards-and-a-router.md). Every shard is a Raft group with
// every member of the cluster, its own leader and, on that leader, its own
// engine and server. A node finds the shard of a queue in its own copy of
// every shard's state (a settled read of the queue's record, no round
// trip): the catalogue is the shards' stores themselves. A request naming
// a queue goes to the leader of the queue's shard, one naming none (SQS
// ListQueues, the dashboard, the admin API's lists) to shard 0's, whose
// server adds the other shards' queues to ListQueues.
//
// Placement: a new queue goes to the shard of the dead-letter queue its
// RedrivePolicy names when that queue exists (so a dead-letter move stays
// one batch in one group), else to the shard its name hashes to. The hash
// makes two creates of the same name, from any nodes, meet in one engine,
// which serialises them as a single node does; and it lets a node whose
// copy of a shard has not applied a create yet still send a request for
// that queue to the right shard. A node that finds a queue in none of its
// copies first catches every copy up with its group (raftstore's
// ReadBarrier), so a create acknowledged through any node is found
// through any other at once; and the node that forwarded a create waits
// for its own copy before it answers. A name lives on one shard: an
// engine asked to create a name another shard holds refuses it
// (queueElsewhere, engine.Options.NameTaken).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/server"
)

// shardsFile records, in a node's data directory, the shard count it was
// first started with.
const shardsFile = "shards"

// checkShardCount refuses to start a node on a data directory written
// with another shard count: the count is fixed when a cluster is first
// started (ADR 0015). A data directory without the record is stamped with
// count, unless it already holds a node's state and count is not 1 (a
// cluster started before the setting had one shard).
func checkShardCount(dir string, count int) error {
	path := filepath.Join(dir, shardsFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		had, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if perr != nil || had < 1 {
			return fmt.Errorf("cluster: %s holds %q, not a shard count", path, b)
		}
		if had != count {
			return fmt.Errorf("cluster.shards: this node's data_dir was started with %d shards, not %d; the count is fixed when the cluster is first started", had, count)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("cluster: %w", err)
	}
	full, err := holdsState(dir)
	if err != nil {
		return err
	}
	if full && count != 1 {
		return fmt.Errorf("cluster.shards: this node's data_dir holds a node started with 1 shard, not %d; the count is fixed when the cluster is first started", count)
	}
	return writeStamp(path, strconv.Itoa(count))
}

// writeStamp records a fixed setting's value (and a newline) in the file
// at path, whole or not at all (written aside, then renamed).
func writeStamp(path, value string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// holdsState reports whether dir holds anything but the records of the
// cluster's fixed settings (shardsFile, placementFile): a node's state.
func holdsState(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("data_dir: %w", err)
	}
	for _, e := range entries {
		if e.Name() != shardsFile && e.Name() != placementFile {
			return true, nil
		}
	}
	return false, nil
}

// hashShard is the shard a queue name hashes to among count.
func hashShard(name string, count int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name)) // a hash.Hash never fails
	return int(h.Sum32() % uint32(count))
}

// nameShard is the shard queue name hashes to, where a queue placed by
// its name lives and where its name is reserved: among every shard, or,
// with [cluster] placement "subset", among the shards above 0, since
// shard 0 is on every node there and a queue on it would cost every node
// its messages (ADR 0016 decision 1).
func (n *Node) nameShard(name string) int {
	count := n.shards.Len()
	if n.opts.Cluster.SubsetPlacement() && count > 1 {
		return 1 + hashShard(name, count-1)
	}
	return hashShard(name, count)
}

// findQueue returns the shard whose copy on this node holds queue name,
// else the one its placement in this node's copy of shard 0 names (a
// shard not held here; with subset placement, any: placedElsewhere). It
// looks first where the name hashes to, where most queues are (one
// read for them; it was a read per shard until the queue's, 7 % of a
// node's CPU under an SQS load of several queues).
func (n *Node) findQueue(name string) (int, bool) {
	k, ok, _ := n.findQueueErr(name)
	return k, ok
}

// findQueueErr is findQueue that also returns the error of a copy that
// could not be read, when no copy held the queue: its "not found" is then
// not certain.
func (n *Node) findQueueErr(name string) (int, bool, error) {
	count := n.shards.Len()
	first := n.nameShard(name)
	var errs []error
	all := true
	for i := range count {
		k := (first + i) % count
		r := n.shards.Shard(k)
		if r == nil {
			all = false
			continue
		}
		st := r.Store()
		ok, err := server.StoredQueue(st, name)
		_ = st.Close() // a view: closing it ends nothing beneath
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d's copy: %w", k, err))
			continue
		}
		if ok {
			return k, true, nil
		}
	}
	if !all || count > 1 && n.opts.Cluster.SubsetPlacement() {
		// Shards this node holds no copy of (ADR 0016): the queue's
		// placement in shard 0, if it names one of them — or, with
		// subset placement, one whose copy here lacks it: a copy
		// catching up (a member the placement just added, still
		// receiving its snapshot), where a dead letter routed to it
		// would otherwise be dropped as routed nowhere.
		if k, ok, err := n.placedElsewhere(name); err != nil {
			errs = append(errs, err)
		} else if ok {
			return k, true, nil
		}
	}
	return 0, false, errors.Join(errs...)
}

// placedElsewhere returns the shard that queue name's live placement in
// this node's copy of shard 0 names, when this node holds no copy of it
// or, with subset placement (where a delete marks its placement gone
// before it is answered), when it does.
func (n *Node) placedElsewhere(name string) (int, bool, error) {
	st := n.raft.Store()
	p, ok, err := server.StoredPlacement(st, name)
	_ = st.Close()
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("shard 0's placements: %w", err)
	case !ok || !p.Gone.IsZero() || p.Shard < 0 || p.Shard >= n.shards.Len() || n.shards.Held(p.Shard) && !n.opts.Cluster.SubsetPlacement():
		return 0, false, nil
	}
	return p.Shard, true, nil
}

// locateQueue returns the shard holding queue name: where a copy on this
// node holds it, else once every copy has caught up. Not found is
// certain only without an error: a copy that could not be read or caught
// up makes it an error.
func (n *Node) locateQueue(ctx context.Context, name string) (int, bool, error) {
	if k, ok, _ := n.findQueueErr(name); ok {
		return k, true, nil
	}
	cerr := n.catchUp(ctx)
	k, ok, err := n.findQueueErr(name)
	if ok {
		return k, true, nil
	}
	return 0, false, errors.Join(cerr, err)
}

// placeQueue returns the shard of the queue rt names: where a copy on this
// node holds it; else, once this node's copies have caught up with their
// groups (catchUp: the queue may have been created through another node
// a moment ago), where a copy holds it then; else (a new queue, or none)
// where placement puts it: with the queue it is tied to, or by its
// name's hash. A name that is not a queue name goes to shard
// 0 (whose server answers it), without a catch-up.
func (n *Node) placeQueue(ctx context.Context, rt server.SQSRoute) int {
	if k, ok := n.cachedRoute(rt.Queue); ok {
		return k
	}
	k, found := n.placeQueueFound(ctx, rt)
	if found {
		n.noteRoute(rt.Queue, k)
	}
	return k
}

// placeQueueFound is placeQueue, and reports whether a copy holds the
// queue (else the shard is where placement puts a new one).
func (n *Node) placeQueueFound(ctx context.Context, rt server.SQSRoute) (int, bool) {
	if !server.ValidQueueName(rt.Queue) {
		return 0, false
	}
	if k, ok := n.findQueue(rt.Queue); ok {
		return k, true
	}
	_ = n.catchUp(ctx) // best effort: a request for a queue not found goes by its name
	if k, ok := n.findQueue(rt.Queue); ok {
		return k, true
	}
	if rt.Create {
		// A new queue lives with the queue it is tied to, when that
		// exists: its dead-letter queue; else the queue its PlaceWithTag
		// names; else, for a name like orders-dlq, the queue orders (so
		// that a dead-letter queue created for an existing queue can be
		// named by that queue's RedrivePolicy).
		for _, with := range []string{rt.DeadLetterTarget, rt.PlaceWith, deadLetterBase(rt.Queue)} {
			if with == "" {
				continue
			}
			if k, ok := n.findQueue(with); ok {
				return k, false
			}
		}
	}
	return n.nameShard(rt.Queue), false
}

// placeCreate places a create of queue rt.Queue: where the queue is, if a
// copy holds it; else where placement puts it, once the shard its name
// hashes to has reserved the name for that shard (engine.ReserveName) —
// or answered that another create of the name was sent elsewhere a
// moment ago, or that the name is its own: there. So two creates of one
// new name sent at once through two nodes (tied to existing
// dead-letter queues on two shards, or one tied and one by its name) meet
// on one, whose engine answers the second as a single node does. A
// reservation that cannot be made — no leader of that shard serving
// within the hold, one that stopped leading — fails the create with an
// error the caller answers 503 (the SDKs retry it): made without it, two
// such creates could land on two shards, a name split for good. Only a
// leader that does not know the call (a node of an older build, during a
// rolling upgrade) lets the create go on without one, logged.
func (n *Node) placeCreate(ctx context.Context, rt server.SQSRoute) (int, error) {
	k, found := n.placeQueueFound(ctx, rt)
	if found || !server.ValidQueueName(rt.Queue) {
		return k, nil
	}
	h := n.nameShard(rt.Queue)
	body, err := server.ReserveNameCall(rt.Queue, k, h)
	to, err := n.nameCall(ctx, h, 0, body, err)
	switch {
	case err == nil && to >= 0 && to < n.shards.Len():
		return to, nil
	case err == nil:
		return 0, fmt.Errorf("shard %d reserved queue %q for shard %d, which this cluster does not have", h, rt.Queue, to)
	case errors.Is(err, server.ErrUnknownEngineCall):
		n.log.Warn("cannot reserve a new queue's name on the shard it hashes to (a node of an older build leads it); creating it where it was placed", "queue", rt.Queue, "shard", k, "hash_shard", h, "err", err)
		return k, nil
	}
	return 0, fmt.Errorf("cannot reserve queue name %q on shard %d, the shard it hashes to: %w", rt.Queue, h, err)
}

// placeDeclared returns the shard of each of the configuration's SQS
// queues ([[queues]]), placed as CreateQueue places a queue, so that each
// shard's server declares its own: a queue that a copy on this node holds
// already stays where it is. The others go in groups: a queue and those it
// is tied to (QueueDeclaration.Ties: its dead-letter queue, the queue its
// sluice:place-with tag names; for a name like orders-dlq, the queue
// orders), transitively, declared or not, live together — on the shard of
// the group's first existing queue (by name), else on the shard the
// group's first name hashes to. A dead-letter queue declared with its
// sources is thus on their shard whichever is declared first, and the
// same configuration places alike on every node. (A queue a copy does
// not show yet, created elsewhere a moment ago, is declared here and
// refused by the engine as a name taken elsewhere, then skipped:
// Server.withoutQueuesElsewhere.) A queue that exists on one shard and
// names one that lives on another (both made before) is placed nowhere
// (-1) with a warning: no shard could apply its declaration.
func (n *Node) placeDeclared(qs []server.QueueDeclaration) []int {
	parent := map[string]string{}
	var root func(string) string
	root = func(x string) string {
		p, ok := parent[x]
		if !ok {
			parent[x] = x
			return x
		}
		if p == x {
			return x
		}
		r := root(p)
		parent[x] = r
		return r
	}
	for _, q := range qs {
		root(q.Name)
		for _, with := range append(q.Ties(), deadLetterBase(q.Name)) {
			if with == "" || !server.ValidQueueName(with) {
				continue
			}
			a, b := root(q.Name), root(with)
			if b < a {
				a, b = b, a
			}
			parent[b] = a // the smaller name is the group's root
		}
	}
	// Where each name lives now, read once: every lookup opens a view of
	// each shard's copy.
	existing := map[string]int{}
	members := map[string][]string{}
	for name := range parent {
		if at, ok := n.findQueue(name); ok {
			existing[name] = at
		}
		r := root(name)
		members[r] = append(members[r], name)
	}
	groupShard := map[string]int{}
	for r, names := range members {
		slices.Sort(names)
		k := n.nameShard(r)
		for _, name := range names {
			if at, ok := existing[name]; ok {
				k = at
				break
			}
		}
		groupShard[r] = k
	}
	out := make([]int, len(qs))
	declared := map[string]int{}
	for i, q := range qs {
		if at, ok := existing[q.Name]; ok {
			out[i] = at
		} else {
			out[i] = groupShard[root(q.Name)]
		}
		declared[q.Name] = out[i]
	}
	// A queue may name a dead-letter queue that exists on another shard
	// (its dead letters move there, ADR 0015 step 5). One that names a
	// queue this declaration creates on another shard (both tied to
	// queues made apart) cannot: that queue may not exist yet when this
	// queue's server declares it, which would then refuse the
	// declaration and fail to start.
	for i, q := range qs {
		for _, with := range q.Ties() {
			if _, ok := existing[with]; ok {
				continue
			}
			at, ok := declared[with]
			if ok && at != out[i] && out[i] >= 0 {
				n.log.Warn("a declared queue and the queue it names live on different shards; its declaration is skipped, its settings left as they are",
					"queue", q.Name, "shard", out[i], "names", with, "its_shard", at)
				out[i] = -1
			}
		}
	}
	return out
}

// deadLetterBase returns, for a name that reads as a dead-letter queue's
// (ending, before a .fifo and without regard to case, in -dlq, _dlq,
// .dlq, -deadletter, _dead_letter and the like), the name of the queue it
// would serve: "orders" for "orders-dlq", "jobs.fifo" for
// "jobs-DLQ.fifo"; else "".
func deadLetterBase(name string) string {
	base, fifo := strings.CutSuffix(name, ".fifo")
	lower := strings.ToLower(base)
	for _, sfx := range [...]string{
		"-dlq", "_dlq", ".dlq",
		"-deadletter", "_deadletter", ".deadletter",
		"-dead-letter", "_dead_letter", ".dead-letter",
	} {
		if strings.HasSuffix(lower, sfx) && len(base) > len(sfx) {
			base = base[:len(base)-len(sfx)]
			if fifo {
				base += ".fifo"
			}
			return base
		}
	}
	return ""
}

// findTask returns the shard of move task id: the one whose copy on this
// node holds its record, once caught up if none did at first (a task
// started through another node a moment ago); shard 0, whose server then
// answers the request, when none holds it.
func (n *Node) findTask(ctx context.Context, id string) int {
	find := func() (int, bool) {
		for k := range n.shards.Len() {
			r := n.shards.Shard(k)
			if r == nil {
				continue // a shard not held: its tasks are not found here (ADR 0016)
			}
			st := r.Store()
			ok, err := server.StoredTask(st, id)
			_ = st.Close() // a view: closing it ends nothing beneath
			if err == nil && ok {
				return k, true
			}
		}
		return 0, false
	}
	if k, ok := find(); ok {
		return k
	}
	_ = n.catchUp(ctx) // best effort: a task not found is answered by shard 0
	if k, ok := find(); ok {
		return k
	}
	return n.findTaskElsewhere(ctx, id)
}

// findTaskElsewhere asks the leader of each shard this node holds no
// copy of ([cluster] placement "subset") for its move tasks, and returns
// the shard whose leader lists task id, 0 if none does (shard 0 then
// answers that it is not found).
func (n *Node) findTaskElsewhere(ctx context.Context, id string) int {
	for k := 1; k < n.shards.Len(); k++ {
		if n.shards.Held(k) {
			continue
		}
		b, err := n.shardRequest(ctx, k, http.MethodGet, server.ShardTasksPath, nil, 16<<20, 2*time.Second)
		if err != nil {
			continue
		}
		var list struct { // api.TaskList, as far as it is read here
			Tasks []struct {
				ID string `json:"id"`
			} `json:"tasks"`
		}
		if json.Unmarshal(b, &list) != nil {
			continue
		}
		for _, t := range list.Tasks {
			if t.ID == id {
				return k
			}
		}
	}
	return 0
}

// catchUpTimeout bounds catchUp: a shard without a leader for longer is
// left as it is (its queues' requests then wait for its leader anyway).
const catchUpTimeout = time.Second

// catchUp brings every shard's copy on this node up to what its group had
// committed when catchUp was called (raftstore's ReadBarrier, in parallel,
// at most catchUpTimeout).
func (n *Node) catchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n.shards.Len())
	for k := range n.shards.Len() {
		r := n.shards.Shard(k)
		if r == nil {
			continue
		}
		wg.Go(func() {
			if err := r.ReadBarrier(ctx); err != nil {
				n.log.Debug("a shard's copy could not catch up", "shard", k, "err", err)
				errs[k] = fmt.Errorf("shard %d's copy could not catch up: %w", k, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// queueElsewhere reports whether queue name lives on a shard other than
// k: where a copy on this node holds it, else once every copy has caught
// up (the engine of shard k asks before it creates the queue: a create
// acknowledged on another shard, through any node, is seen).
func (n *Node) queueElsewhere(k int, name string) bool {
	if !server.ValidQueueName(name) {
		return false // AMQP-only names (vhosts, dots) are no SQS queue's
	}
	at, ok, _ := n.locateQueue(context.Background(), name) // not certain: taken as not elsewhere, as a create guard always did
	return ok && at != k
}

// createdKey is the context key of a forwarded CreateQueue's queue and
// shard (awaitCreated).
type createdKey struct{}

type created struct {
	shard int
	queue string
}

// shardOf finds the shard a public HTTP request is for, and returns the
// request to forward (its body, if read, buffered again) and the function
// that releases that buffer once the request is over. With one shard it
// reads nothing. ok is false when it answered the request itself (a body
// it could not read).
func (n *Node) shardOf(w http.ResponseWriter, r *http.Request) (k int, out *http.Request, release func(), ok bool) {
	release = func() {}
	if n.shards.Len() == 1 {
		return 0, r, release, true
	}
	if rest, found := strings.CutPrefix(r.URL.Path, "/sluice/"); found {
		// The admin API's and the dashboard's per-queue paths go where
		// the queue is; the rest (lists, the overview, definitions) to
		// shard 0, whose server reads the lists of the others.
		for _, perQueue := range []string{"v1/queues/", "v1/dashboard/queues/"} {
			if rest, found := strings.CutPrefix(rest, perQueue); found {
				name, _, _ := strings.Cut(rest, "/")
				return n.placeQueue(r.Context(), server.SQSRoute{Queue: name}), r, release, true
			}
		}
		// Move tasks live with their source queue: a task's paths go to
		// the shard holding it, a source's task list to that source's.
		if rest, found := strings.CutPrefix(rest, "v1/tasks/"); found {
			id, _, _ := strings.Cut(rest, "/")
			return n.findTask(r.Context(), id), r, release, true
		}
		if rest == "v1/tasks" {
			if src := r.URL.Query().Get("source"); src != "" {
				return n.placeQueue(r.Context(), server.SQSRoute{Queue: src}), r, release, true
			}
		}
		if rest == "v1/queues" && r.Method == http.MethodPost {
			return n.placeAdminCreate(w, r)
		}
		return 0, r, release, true
	}
	body, r, release, err := n.bufferBody(w, r, server.MaxSQSRequestBody)
	if err != nil {
		// Too large, unreadable, or over the budget: the leader's
		// handler would refuse it too; this node says so itself.
		unavailableOrTooLarge(w, r, err)
		return 0, r, release, false
	}
	rt := server.SQSRouteOf(r, body)
	if rt.Queue == "" {
		return 0, r, release, true
	}
	if !rt.Create {
		return n.placeQueue(r.Context(), rt), r, release, true
	}
	k, r, ok = n.routeCreate(w, r, rt)
	return k, r, release, ok
}

// routeCreate places a create (placeCreate) and returns its shard and the
// request to forward, which carries them for awaitCreated. ok is false
// when it answered the request itself: 503, retryable, when the name
// could not be reserved.
func (n *Node) routeCreate(w http.ResponseWriter, r *http.Request, rt server.SQSRoute) (int, *http.Request, bool) {
	k, err := n.placeCreate(r.Context(), rt)
	if err != nil {
		n.log.Warn("a create is refused for now", "queue", rt.Queue, "err", err)
		unavailable(w, r, "the new queue's name cannot be reserved on the shard it hashes to now (no serving leader there); retry")
		return 0, r, false
	}
	return k, r.WithContext(context.WithValue(r.Context(), createdKey{}, created{shard: k, queue: rt.Queue})), true
}

// bufferBody reads r's body (at most limit bytes, under the node's shared
// body budget) and returns it with a copy of r that carries it again, and
// the function that gives the buffer back once the request is over. A
// request without a body is returned as it is, with a body of nil.
func (n *Node) bufferBody(w http.ResponseWriter, r *http.Request, limit int) ([]byte, *http.Request, func(), error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, r, func() {}, nil
	}
	body, release, err := n.bodies.Read(r.Context(), http.MaxBytesReader(w, r.Body, int64(limit)), int64(limit))
	if err != nil {
		return nil, r, func() {}, err
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = nil
	return body, r, release, nil
}

// placeAdminCreate places the queue that POST /sluice/v1/queues (the
// dashboard's create form) names as an SQS CreateQueue is placed: with the
// existing dead-letter queue the form chose, else by its name (its own
// dead-letter queue, if asked for, is created with it). Without this every
// such queue landed on shard 0, and one given a dead-letter queue on
// another shard was refused. It reads at most the admin API's own body
// limit, and refuses a longer body as the admin API does (413
// RequestTooLarge); a body it cannot decode goes to shard 0, whose handler
// answers it.
func (n *Node) placeAdminCreate(w http.ResponseWriter, r *http.Request) (int, *http.Request, func(), bool) {
	body, r, release, err := n.bufferBody(w, r, server.MaxAdminRequestBody)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) || errors.Is(err, server.ErrBodyTooLarge) {
			server.WriteAdminError(w, http.StatusRequestEntityTooLarge, "RequestTooLarge",
				"request body exceeds "+strconv.Itoa(server.MaxAdminRequestBody)+" bytes")
		} else {
			unavailable(w, r, "the request body could not be read now; retry")
		}
		return 0, r, release, false
	}
	var form struct {
		Name            string `json:"name"`
		DeadLetterQueue string `json:"deadLetterQueue"`
	}
	if json.Unmarshal(body, &form) != nil || form.Name == "" {
		return 0, r, release, true
	}
	rt := server.SQSRoute{Queue: form.Name, Create: true, DeadLetterTarget: form.DeadLetterQueue}
	k, r, ok := n.routeCreate(w, r, rt)
	return k, r, release, ok
}

// unavailableOrTooLarge answers a request whose body shardOf could not
// read: 413 in the request's protocol for one over the SQS limit, else
// 503 (retryable: the budget was full, or the client stopped sending).
func unavailableOrTooLarge(w http.ResponseWriter, r *http.Request, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) || errors.Is(err, server.ErrBodyTooLarge) {
		w.Header().Set("Connection", "close")
		writeError(w, r, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "Sender",
			"Request body is larger than "+strconv.Itoa(server.MaxSQSRequestBody)+" bytes.")
		return
	}
	unavailable(w, r, "the request body could not be read now; retry")
}

// awaitCreated, for a CreateQueue (or the admin API's create) forwarded to
// its shard's leader and answered 200 (201), waits (at most the hold
// timeout) until this node's copy of that shard has applied the create, so
// that the client's next request through this node finds the queue
// without a barrier of its own.
func (n *Node) awaitCreated(resp *http.Response) {
	c, ok := resp.Request.Context().Value(createdKey{}).(created)
	if !ok || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated) {
		return
	}
	ctx, cancel := context.WithTimeout(resp.Request.Context(), n.hold)
	defer cancel()
	n.settleCreated(ctx, c)
}

// settleCreated, once queue c was created on its shard's leader, writes
// its placement in shard 0 (placeCreated) and waits until this node's
// copy of that shard, if it holds one, has applied the create, so that
// the next request through this node finds the queue without a barrier of
// its own. A failure is logged: the queue exists either way.
func (n *Node) settleCreated(ctx context.Context, c created) {
	n.placeCreated(ctx, c)
	r := n.shards.Shard(c.shard)
	if r == nil {
		return // a shard this node holds no copy of: nothing more here to catch up
	}
	if err := r.ReadBarrier(ctx); err != nil {
		n.log.Warn("a created queue may not be in this node's copy of its shard yet", "queue", c.queue, "shard", c.shard, "err", err)
	}
}

// placeCreated, with [cluster] placement "subset" (ADR 0016), writes the
// placement of a queue just created on its shard in shard 0 and waits
// until this node's copy of shard 0 has it, before the create is
// answered: a node that holds no copy of that shard finds the queue by
// it (the shard's leader's keeper would write it too, within its round).
// A failure is logged: the keeper writes it later.
func (n *Node) placeCreated(ctx context.Context, c created) {
	if !n.opts.Cluster.SubsetPlacement() {
		return
	}
	_, err := n.nameCall(ctx, 0, n.hold, server.PlacementsCall(c.shard, []string{c.queue}, false), nil)
	if err == nil {
		err = n.raft.ReadBarrier(ctx)
	}
	if err != nil {
		n.log.Warn("a created queue's placement is not written yet; nodes without a copy of its shard find it once its leader writes it", "queue", c.queue, "shard", c.shard, "err", err)
	}
}

// placeDeleted, with [cluster] placement "subset" (ADR 0016), marks the
// placement of queue name, which this node's leader of shard k deleted
// at, gone in shard 0 (engine.MarkPlacementDeleted), before the delete is
// answered: ListQueues, which shard 0's leader answers from the
// placements of the shards it holds no copy of, then no longer lists it.
// Before 2026-12-06 only the shard's keeper marked it, once a minute and
// never within PlacementGrace of the entry's writing, so a deleted queue
// was listed for up to two minutes. A failure is logged: the keeper marks
// it later. It waits at most the hold timeout.
func (n *Node) placeDeleted(k int, name string, at time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), n.hold)
	defer cancel()
	_, err := n.nameCall(ctx, 0, n.hold, server.PlacementDeletedCall(k, name, at), nil)
	switch {
	case errors.Is(err, server.ErrUnknownEngineCall):
		n.log.Debug("a deleted queue's placement is left to its shard's keeper: shard 0's leader is of an older build", "queue", name, "shard", k)
	case err != nil:
		n.log.Warn("a deleted queue's placement is not marked gone yet; nodes without a copy of its shard list it until its leader's next round", "queue", name, "shard", k, "err", err)
	}
}

// placingWriter is the ResponseWriter of a create this node's own server
// answers, with [cluster] placement "subset": before the status goes out,
// a 200 or 201 writes the queue's placement (placeCreated).
type placingWriter struct {
	http.ResponseWriter
	n    *Node
	ctx  context.Context
	c    created
	done bool
}

func (w *placingWriter) WriteHeader(status int) {
	if !w.done {
		w.done = true
		if status == http.StatusOK || status == http.StatusCreated {
			ctx, cancel := context.WithTimeout(w.ctx, w.n.hold)
			w.n.placeCreated(ctx, w.c)
			cancel()
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *placingWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *placingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// holdDeleted, for queue name about to be deleted by this node's leader
// of shard k (server.Options.HoldDeleted, before the delete), tells the
// shard its name hashes to, when that is another, that it is deleted
// there: for NameReuseDelay every create of the name is then sent to
// shard k, whose engine refuses it as deleted recently
// (engine.HoldDeletedName) — a single node's rule, which otherwise held
// on the queue's own shard only (a create tied to another dead-letter
// queue, or to none, was placed elsewhere and made at once). A hold that
// cannot be made within n.hold fails the delete (503 over SQS; until
// 2026-12-01 it was logged and the delete went on, so the name could be
// made again elsewhere at once).
func (n *Node) holdDeleted(k int, name string) error {
	if !server.ValidQueueName(name) {
		return nil
	}
	h := n.nameShard(name)
	if h == k {
		return nil // the queue's own engine refuses the name
	}
	body, err := server.HoldDeletedNameCall(name, k, h)
	_, err = n.nameCall(context.Background(), h, n.hold, body, err)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, server.ErrUnknownEngineCall):
		// A leader of an older build (a rolling upgrade) keeps no holds:
		// the delete goes on, as it did before them.
		n.log.Warn("a deleted queue's name may be made again on another shard before 60 s: the leader of the shard it hashes to is of an older build", "queue", name, "shard", k, "hash_shard", h)
		return nil
	}
	n.log.Warn("a queue is not deleted: its name cannot be held on the shard it hashes to", "queue", name, "shard", k, "hash_shard", h, "err", err)
	return fmt.Errorf("the leader of shard %d, which holds the name, did not answer: %w", h, err)
}

// nameCall runs a call answered by server.NameCallReply (a name call,
// server.ReserveNameCall or server.HoldDeletedNameCall, on the leader of
// shard h, the one the name hashes to; a placement call on shard 0's:
// body and its encoding error) and returns its answer.
func (n *Node) nameCall(ctx context.Context, h int, timeout time.Duration, body []byte, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	out, err := n.shardRequest(ctx, h, http.MethodPost, server.ShardEnginePath, body, maxShardCallReply, timeout)
	if err != nil {
		return 0, err
	}
	return server.NameCallReply(out)
}

// otherQueueNames lists the queues of shards 1 and up from this node's
// copies (shard 0's server, which serves ListQueues, lists its own).
func (n *Node) otherQueueNames(prefix string) ([]string, error) {
	var names []string
	var errs []error
	for k := 1; k < n.shards.Len(); k++ {
		r := n.shards.Shard(k)
		if r == nil {
			got, err := n.placedNames(k, prefix)
			if err != nil {
				errs = append(errs, fmt.Errorf("shard %d's placements: %w", k, err))
			}
			names = append(names, got...)
			continue
		}
		st := r.Store()
		got, err := server.StoredQueueNames(st, prefix)
		_ = st.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", k, err))
			continue
		}
		names = append(names, got...)
	}
	return names, errors.Join(errs...)
}

// placedNames lists the SQS queues whose live placement in this node's
// copy of shard 0 names shard k, a shard it holds no copy of (ADR 0016),
// and whose name starts with prefix.
func (n *Node) placedNames(k int, prefix string) ([]string, error) {
	st := n.raft.Store()
	ps, err := server.StoredPlacements(st, k)
	_ = st.Close()
	var out []string
	for _, p := range ps {
		if p.Gone.IsZero() && strings.HasPrefix(p.Name, prefix) && server.ValidQueueName(p.Name) {
			out = append(out, p.Name)
		}
	}
	return out, err
}

// applyShardDiskAlarm sets the disk alarm of srv, the server of a shard
// other than 0 this node leads: refusing new messages while this node's
// own disk is low or shard 0's leader found a quorum's low (health.go).
func (n *Node) applyShardDiskAlarm(srv *server.Server) {
	if n.opts.MinFreeDisk <= 0 {
		return
	}
	n.mu.Lock()
	refuse := n.disk.low || n.disk.quorumLow
	n.mu.Unlock()
	srv.SetDiskAlarm(refuse)
}
