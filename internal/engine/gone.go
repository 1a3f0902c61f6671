package engine

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// A deleted queue's name cannot be used again for NameReuseDelay (SQS:
// "wait 60 seconds after deleting a queue before you can create another
// queue with the same name"). The engine keeps the times of its deletes
// in memory (Engine.deleted) and, so that a restart — and, in a cluster,
// the next leader's engine, which opens on the replicated store — keeps
// them too, in a gone record written in the delete's own batch: read back
// by recover, swept once older than NameReuseDelay (by later deletes, at
// most once a goneSweepEvery), removed by the create that uses the name
// again.

// prefixGone keys a deleted queue's name: "G" name → format byte 1,
// varint Unix ns of the delete.
const prefixGone = 'G'

// goneSweepEvery bounds how often a delete sweeps the old gone records.
const goneSweepEvery = time.Minute

func goneKey(name string) []byte { return append([]byte{prefixGone}, name...) }

func encodeGone(at int64) []byte {
	return binary.AppendVarint([]byte{recordV1}, at)
}

func decodeGone(v []byte) (int64, error) {
	if len(v) < 1 || v[0] != recordV1 {
		return 0, errors.New("engine: deleted-name record: unknown format")
	}
	at, n := binary.Varint(v[1:])
	if n <= 0 || 1+n != len(v) {
		return 0, errors.New("engine: deleted-name record: bad time")
	}
	return at, nil
}

// recoverGone reads the gone records into e.deleted (at Open), old ones
// too: a create of the name removes its record, the next sweep the rest.
// An unreadable one is skipped (it can only delay a name); the next sweep
// removes it.
func (e *Engine) recoverGone() error {
	return e.st.Scan([]byte{prefixGone}, func(k, v []byte) error {
		if at, err := decodeGone(v); err == nil {
			e.deleted[string(k[1:])] = at
		}
		return nil
	})
}

// sweepGoneLocked deletes, into b, the gone records older than
// NameReuseDelay (and unreadable ones), and forgets those deletes in
// e.deleted, at most once every goneSweepEvery (e.adminMu held).
func (e *Engine) sweepGoneLocked(now int64, b *store.Batch) error {
	if now-e.goneSwept >= int64(goneSweepEvery) {
		e.mu.Lock()
		for name, at := range e.deleted {
			if now-at >= int64(NameReuseDelay) {
				delete(e.deleted, name)
			}
		}
		e.mu.Unlock()
	}
	return e.sweepAgedLocked(prefixGone, &e.goneSwept, goneSweepEvery, NameReuseDelay, now, b, decodeGone)
}
