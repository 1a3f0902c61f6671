package engine

import (
	"errors"
	"strings"

	"github.com/sluicemq/sluice/internal/store"
)

// The catalogue reads below look at a store without an engine open on it:
// a cluster node reads its own copy of every shard's state to find which
// shard holds a queue, or a move task (docs/adr/0015-shards-and-a-router.md).
// They read only the queue records (prefix 'Q') and the task records
// (prefix 'T', storage-format.md), settled (a replicated store's
// SettledReader: no wait for this node's own writes in flight), so what
// they see may lag the shard's leader by the time its writes take to
// apply here.

// StoredQueue reports whether st holds the record of queue name.
func StoredQueue(st store.Store, name string) (bool, error) {
	if !ValidQueueName(name) {
		return false, nil
	}
	return storedKey(st, queueKey(name))
}

// StoredTask reports whether st holds the record of move task id (a
// redrive or an SQS message move task; tasks live with their source
// queue).
func StoredTask(st store.Store, id string) (bool, error) {
	if id == "" || len(id) > 64 {
		return false, nil
	}
	return storedKey(st, taskKey(id))
}

// getSettled is st.Get read settled when st can (store.SettledReader):
// without waiting for this node's own last proposal to apply. It sees
// every write whose Pending.Wait has returned.
func getSettled(st store.Store, key []byte) ([]byte, error) {
	if sr, ok := st.(store.SettledReader); ok {
		return sr.GetSettled(key)
	}
	return st.Get(key)
}

// scanSettled is st.ScanRange read settled when st can
// (store.SettledReader), as getSettled reads a key.
func scanSettled(st store.Store, start, end []byte, fn func(k, v []byte) error) error {
	if sr, ok := st.(store.SettledReader); ok {
		return sr.ScanRangeSettled(start, end, fn)
	}
	return st.ScanRange(start, end, fn)
}

// storedKey reports whether st holds key, read settled when st can.
func storedKey(st store.Store, key []byte) (bool, error) {
	_, err := getSettled(st, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	}
	return false, err
}

// StoredQueueNames returns the names, sorted, of the queues whose record
// st holds and whose name starts with prefix.
func StoredQueueNames(st store.Store, prefix string) ([]string, error) {
	start := queueKey(prefix)
	end := []byte{prefixQueue + 1}
	var names []string
	fn := func(k, _ []byte) error {
		name := string(k[1:])
		if !strings.HasPrefix(name, prefix) {
			return store.ErrStopScan
		}
		names = append(names, name)
		return nil
	}
	err := scanSettled(st, start, end, fn)
	return names, err
}

// StoredDeadLetterSources returns, for every queue named by the
// RedrivePolicy of a queue whose record st holds, those queues: in a
// cluster with shards, another shard's sources of each dead-letter queue
// (Options.SourcesElsewhere).
func StoredDeadLetterSources(st store.Store) (map[string][]string, error) {
	out := map[string][]string{}
	fn := func(_, v []byte) error {
		r, err := decodeQueue(v)
		if err != nil {
			return err
		}
		if d := r.Config.DeadLetter; d != nil && !d.Routed && d.Target != "" {
			out[d.Target] = append(out[d.Target], r.Name)
		}
		return nil
	}
	start, end := []byte{prefixQueue}, []byte{prefixQueue + 1}
	err := scanSettled(st, start, end, fn)
	return out, err
}
