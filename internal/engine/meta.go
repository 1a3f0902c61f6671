package engine

import (
	"errors"
	"strings"

	"github.com/sluicemq/sluice/internal/store"
)

// Front-end metadata: small durable records a protocol front-end keeps
// beside the queues (AMQP vhosts, exchanges, bindings, users). The engine
// stores them and never interprets them; front-ends never touch the store
// directly. Keys are "X" namespace 0x00 key.
const prefixMeta = 'X'

var errMetaName = errors.New("engine: metadata namespace must be non-empty and free of NUL bytes")

func metaKey(ns, key string) []byte {
	k := make([]byte, 0, 2+len(ns)+len(key))
	k = append(k, prefixMeta)
	k = append(k, ns...)
	k = append(k, 0)
	return append(k, key...)
}

// MetaRecord is one front-end metadata record: Value stored under
// (Namespace, Key), as PutMeta stores it.
type MetaRecord struct {
	Namespace, Key string
	Value          []byte
}

// PutMeta durably stores value under (namespace, key), replacing any
// previous value. It returns once the write is synced.
func (e *Engine) PutMeta(namespace, key string, value []byte) error {
	return e.metaWrite(namespace, func(b *store.Batch) { b.Set(metaKey(namespace, key), value) })
}

// DeleteMeta durably removes (namespace, key); a missing key is not an
// error.
func (e *Engine) DeleteMeta(namespace, key string) error {
	return e.metaWrite(namespace, func(b *store.Batch) { b.Delete(metaKey(namespace, key)) })
}

func (e *Engine) metaWrite(ns string, fill func(*store.Batch)) error {
	if ns == "" || strings.IndexByte(ns, 0) >= 0 {
		return errMetaName
	}
	var b store.Batch
	fill(&b)
	return e.writeSynced(&b)
}

// writeSynced writes b durably and waits for its sync.
func (e *Engine) writeSynced(b *store.Batch) error {
	p, err := e.write(b, true)
	if err != nil {
		return err
	}
	return e.wait(p)
}

// ScanMeta calls fn for every record of the namespace, in key order. It
// reads the store, so front-ends call it when they start, not per request.
// value is valid only during the call.
func (e *Engine) ScanMeta(namespace string, fn func(key string, value []byte) error) error {
	if namespace == "" || strings.IndexByte(namespace, 0) >= 0 {
		return errMetaName
	}
	prefix := metaKey(namespace, "")
	return e.st.Scan(prefix, func(k, v []byte) error {
		return fn(string(k[len(prefix):]), v)
	})
}
