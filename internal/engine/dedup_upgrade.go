package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/sluicemq/sluice/internal/store"
)

// upgradeDedup returns the batch that rewrites the dedup records of an
// older release into the current layout (dedup.go), or an empty batch.
//
// Releases before issue #13's dedup change wrote "D" qid group 0x00 id
// with a format 1 value and no E index, and read every D record at Open.
// The current layout writes "D" qid id 0x00 group with a format 2 value
// and an E record per D record, in the same batch, and deletes them
// together. So a store without any E record holds only format 1 D records
// (or none): that is the one case in which Open reads D, once. Each live
// record is moved to its new key with its E record; expired ones are
// deleted. Records of a queue that has no Q record are classified by the
// audit like any leftover. The caller writes the batch durably, with the
// leftovers, after the audit has found nothing unexplained; until then
// the store is unchanged, and a crash before that write upgrades again.
//
// All deletes come before all sets: an old key can equal another
// record's new key (group "a", id "b" and group "b", id "a").
func (e *Engine) upgradeDedup(byID map[uint32]*queue, audit *recoveryAudit, now int64) (store.Batch, error) {
	var out store.Batch
	hasExpiry := false
	err := e.st.ScanRange([]byte{prefixDedupExpiry}, []byte{prefixDedupExpiry + 1}, func(_, _ []byte) error {
		hasExpiry = true
		return store.ErrStopScan
	})
	if err != nil || hasExpiry {
		return out, err
	}
	var dels, sets store.Batch
	err = e.st.Scan([]byte{prefixDedup}, func(k, v []byte) error {
		if len(k) < 6 {
			return fmt.Errorf("%w: dedup key %x", errCorrupt, k)
		}
		qid := binary.BigEndian.Uint32(k[1:])
		q := byID[qid]
		if q == nil {
			audit.unknownQueue(k, qid)
			return nil
		}
		if len(v) == 0 || v[0] != recordV1 {
			return fmt.Errorf("%w: dedup record %x of format %x has no expiry index record", errCorrupt, k, v[:min(len(v), 1)])
		}
		rest := k[5:]
		sep := bytes.IndexByte(rest, 0)
		if sep < 0 {
			return fmt.Errorf("%w: dedup key %x", errCorrupt, k)
		}
		ent := &dedupEntry{group: string(rest[:sep]), id: string(rest[sep+1:])}
		if err := decodeDedup(ent, v); err != nil {
			return fmt.Errorf("dedup key %x: %w", k, err)
		}
		dels.Delete(bytes.Clone(k))
		if ent.expiresAt <= now {
			return nil
		}
		sets.Set(dedupKey(qid, ent.id, ent.group), encodeDedup(ent))
		sets.Set(dedupExpiryKey(qid, ent.expiresAt, ent.seq), dedupSuffix(nil, ent.id, ent.group))
		return nil
	})
	if err != nil {
		return out, err
	}
	if dels.Len() > 0 {
		e.log.Info("upgrading FIFO deduplication records to the on-disk index layout",
			"records", dels.Len(), "live", sets.Len()/2)
	}
	for _, op := range dels.Ops {
		out.Delete(op.Key)
	}
	for _, op := range sets.Ops {
		out.Set(op.Key, op.Value)
	}
	return out, nil
}
