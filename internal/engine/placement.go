package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicemq/sluice/internal/store"
)

// Queue placements (ADR 0016): in a cluster with shards, shard 0's
// engine keeps an entry for every queue name of every shard — the shard
// the name lives on, when the entry was written and, once the queue is
// gone, when that was seen. An entry says where the name goes, not
// whether the queue exists: the queue's own shard is the authority for
// that. A node that holds no copy of a queue's shard ([cluster]
// placement "subset") routes by it; a create writes it, and each shard's
// leader keeps its shard's entries true (UpdatePlacements, called by its
// keeper).

// prefixPlacement keys a placement: "L" name → format byte 1, uvarint
// shard, varint Unix ns it was written, varint Unix ns the queue was seen
// gone (0 while it lives).
const prefixPlacement = 'L'

// PlacementGrace is how long an entry stands, once written, against a
// shard's leader that does not hold its queue: a create placed a moment
// ago may not have reached its shard yet, and is not marked gone.
const PlacementGrace = time.Minute

// placementSweepEvery bounds how often UpdatePlacements sweeps the entries
// marked gone more than NameReuseDelay ago.
const placementSweepEvery = time.Minute

// maxPlacementName bounds one name of an UpdatePlacements: an AMQP
// queue's name (at most 255 bytes) with its vhost's prefix fits.
const maxPlacementName = 1024

// MaxPlacementNames bounds the names of one UpdatePlacements: a shard's
// keeper sends more in several calls.
const MaxPlacementNames = 10_000

// Placement is one queue name's entry (StoredPlacements).
type Placement struct {
	Name   string
	Shard  int
	Placed time.Time // when the entry was written
	Gone   time.Time // when its shard's leader reported the queue gone; zero while it lives
}

func placementKey(name string) []byte { return append([]byte{prefixPlacement}, name...) }

func encodePlacement(shard int, placed, gone int64) []byte {
	b := []byte{recordV1}
	b = binary.AppendUvarint(b, uint64(shard))
	b = binary.AppendVarint(b, placed)
	return binary.AppendVarint(b, gone)
}

func decodePlacement(v []byte) (shard int, placed, gone int64, err error) {
	if len(v) < 1 || v[0] != recordV1 {
		return 0, 0, 0, errors.New("engine: placement record: unknown format")
	}
	v = v[1:]
	s, n := binary.Uvarint(v)
	if n <= 0 || s > 1<<16 {
		return 0, 0, 0, errors.New("engine: placement record: bad shard")
	}
	v = v[n:]
	p, n := binary.Varint(v)
	if n <= 0 {
		return 0, 0, 0, errors.New("engine: placement record: bad time")
	}
	v = v[n:]
	g, n := binary.Varint(v)
	if n <= 0 || n != len(v) {
		return 0, 0, 0, errors.New("engine: placement record: bad time")
	}
	return int(s), p, g, nil
}

// PlacementUpdate is what one UpdatePlacements changed.
type PlacementUpdate struct {
	Written int // entries written or revived for the shard's queues
	Gone    int // entries marked gone
	// Elsewhere lists the names the shard holds whose entry names
	// another shard, where the queue lives as far as the entry knows:
	// left as they are, and logged by the caller (a name on two shards
	// would be a fault of placement).
	Elsewhere []string
}

// UpdatePlacements is, on shard 0's engine, what the leader of shard
// found: held are queues it holds (an entry naming another shard that is
// not gone is left, and reported in Elsewhere; any other is written for
// shard, unless it already names shard and lives), gone are names whose
// entry names shard but whose queue it does not hold (such an entry,
// written at least PlacementGrace before this engine's clock and not
// marked yet, is marked gone now). Entries marked gone NameReuseDelay
// ago or more are swept, at most once a minute. The changes are one
// synced batch; at most MaxPlacementNames names in all.
func (e *Engine) UpdatePlacements(shard int, held, gone []string) (PlacementUpdate, error) {
	var u PlacementUpdate
	if len(held)+len(gone) > MaxPlacementNames {
		return u, &ConfigError{Setting: "Names", Reason: fmt.Sprintf("%d names in one update: at most %d", len(held)+len(gone), MaxPlacementNames)}
	}
	if err := checkPlacementArgs(shard, held, gone); err != nil {
		return u, err
	}
	e.adminMu.Lock()
	defer e.adminMu.Unlock()
	if err := e.Failed(); err != nil {
		return u, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	now := e.now()
	var b store.Batch
	for _, name := range held {
		s, _, g, found, err := e.placementLocked(name)
		if err != nil {
			return u, err
		}
		switch {
		case found && s == shard && g == 0:
			continue
		case found && s != shard && g == 0:
			u.Elsewhere = append(u.Elsewhere, name)
			continue
		}
		b.Set(placementKey(name), encodePlacement(shard, now, 0))
		u.Written++
	}
	for _, name := range gone {
		marked, err := e.markGoneLocked(&b, shard, name, now, PlacementGrace)
		if err != nil {
			return u, err
		}
		if marked {
			u.Gone++
		}
	}
	err := e.sweepAgedLocked(prefixPlacement, &e.placementSwept, placementSweepEvery, NameReuseDelay, now, &b, func(v []byte) (int64, error) {
		_, _, g, err := decodePlacement(v)
		if err == nil && g == 0 {
			return math.MaxInt64, nil // lives: never aged
		}
		return g, err
	})
	if err != nil {
		return u, err
	}
	if b.Len() == 0 {
		return u, nil
	}
	return u, e.writeSynced(&b)
}

// DeletedMarkWindow is how long after a queue's delete its shard's leader
// may still mark its placement gone with MarkPlacementDeleted: half of
// NameReuseDelay, within which no shard makes the name again, less any
// clock difference between that leader and shard 0's. A mark that reaches
// shard 0 later (a write held back by a partition) is ignored, since the
// name may live again by then; the keeper marks it in its next round.
const DeletedMarkWindow = NameReuseDelay / 2

// MarkPlacementDeleted is, on shard 0's engine, what the leader of shard
// tells it once it has deleted queue name at (its engine's clock): name's
// entry, if it names shard and lives, is marked gone now, without the
// PlacementGrace that UpdatePlacements gives a recent entry (that grace
// guards against a keeper's listing older than a create; a committed
// delete is not such a listing, and the name cannot be made again on any
// shard for NameReuseDelay). A mark more than DeletedMarkWindow after at
// by this engine's clock changes nothing. It reports whether the entry
// was marked; the change is one synced write.
func (e *Engine) MarkPlacementDeleted(shard int, name string, at time.Time) (bool, error) {
	if err := checkPlacementArgs(shard, []string{name}); err != nil {
		return false, err
	}
	e.adminMu.Lock()
	defer e.adminMu.Unlock()
	if err := e.Failed(); err != nil {
		return false, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	now := e.now()
	if now-at.UnixNano() > int64(DeletedMarkWindow) {
		return false, nil
	}
	var b store.Batch
	marked, err := e.markGoneLocked(&b, shard, name, now, 0)
	if err != nil || !marked {
		return false, err
	}
	if err := e.writeSynced(&b); err != nil {
		return false, err
	}
	return true, nil
}

// checkPlacementArgs refuses, with a ConfigError, a shard number no
// cluster has and a name that no queue has.
func checkPlacementArgs(shard int, lists ...[]string) error {
	if shard < 0 || shard > 1<<16 {
		return &ConfigError{Setting: "Shard", Reason: fmt.Sprintf("%d is not a shard", shard)}
	}
	for _, names := range lists {
		for _, name := range names {
			if name == "" || len(name) > maxPlacementName {
				return &ConfigError{Setting: "Names", Reason: fmt.Sprintf("%q is not a queue name", name)}
			}
		}
	}
	return nil
}

// markGoneLocked adds to b the mark, at now, of name's entry gone, when
// the entry names shard, lives, and was written at least grace before
// now (e.adminMu held); it reports whether it did.
func (e *Engine) markGoneLocked(b *store.Batch, shard int, name string, now int64, grace time.Duration) (bool, error) {
	s, p, g, found, err := e.placementLocked(name)
	if err != nil || !found || s != shard || g != 0 || now-p < int64(grace) {
		return false, err
	}
	b.Set(placementKey(name), encodePlacement(s, p, now))
	return true, nil
}

// placementLocked reads name's entry (e.adminMu held), settled: every
// entry was written by a leader that waited for its sync.
func (e *Engine) placementLocked(name string) (shard int, placed, gone int64, found bool, err error) {
	v, err := getSettled(e.st, placementKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return 0, 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, 0, false, err
	}
	shard, placed, gone, err = decodePlacement(v)
	return shard, placed, gone, err == nil, err
}

// StoredPlacement returns name's placement in st (a copy of shard 0's
// store), read settled when st can, if it has one.
func StoredPlacement(st store.Store, name string) (Placement, bool, error) {
	v, err := getSettled(st, placementKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return Placement{}, false, nil
	}
	if err != nil {
		return Placement{}, false, err
	}
	s, p, g, err := decodePlacement(v)
	if err != nil {
		return Placement{}, false, fmt.Errorf("placement of %q: %w", name, err)
	}
	pl := Placement{Name: name, Shard: s, Placed: time.Unix(0, p)}
	if g != 0 {
		pl.Gone = time.Unix(0, g)
	}
	return pl, true, nil
}

// StoredPlacements returns the placements st (a copy of shard 0's store)
// holds, in name order, read settled when st can; shard ≥ 0 keeps only
// the entries naming it.
func StoredPlacements(st store.Store, shard int) ([]Placement, error) {
	var out []Placement
	fn := func(k, v []byte) error {
		s, p, g, err := decodePlacement(v)
		if err != nil {
			return fmt.Errorf("placement of %q: %w", k[1:], err)
		}
		if shard >= 0 && s != shard {
			return nil
		}
		pl := Placement{Name: string(k[1:]), Shard: s, Placed: time.Unix(0, p)}
		if g != 0 {
			pl.Gone = time.Unix(0, g)
		}
		out = append(out, pl)
		return nil
	}
	start, end := []byte{prefixPlacement}, []byte{prefixPlacement + 1}
	err := scanSettled(st, start, end, fn)
	return out, err
}

// Shard leaders (ADR 0016): in a cluster with shards, shard 0's engine
// also keeps, for every shard, the last leader that recorded itself —
// its term, its node and what it advertises (the cluster layer's
// advertisement, opaque here) — so that a node that holds no copy of a
// shard can find its leader. A record of an older term never replaces
// a newer one.

// prefixLeader keys a shard's leader record: "A" shard:u32 → format byte
// 1, uvarint term, uvarint node id, then the advertisement.
const prefixLeader = 'A'

// maxLeaderAd bounds a recorded advertisement.
const maxLeaderAd = 4 << 10

// ShardLeader is a shard's leader as it recorded itself (RecordLeader).
type ShardLeader struct {
	Shard int
	Term  uint64
	Node  uint64
	Ad    []byte
}

func leaderKey(shard int) []byte {
	return binary.BigEndian.AppendUint32([]byte{prefixLeader}, uint32(shard))
}

func encodeLeader(term, node uint64, ad []byte) []byte {
	b := []byte{recordV1}
	b = binary.AppendUvarint(b, term)
	b = binary.AppendUvarint(b, node)
	return append(b, ad...)
}

func decodeLeader(v []byte) (term, node uint64, ad []byte, err error) {
	if len(v) < 1 || v[0] != recordV1 {
		return 0, 0, nil, errors.New("engine: leader record: unknown format")
	}
	v = v[1:]
	t, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, 0, nil, errors.New("engine: leader record: bad term")
	}
	v = v[n:]
	id, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, 0, nil, errors.New("engine: leader record: bad node")
	}
	return t, id, v[n:], nil
}

// RecordLeader is, on shard 0's engine, node's record that it leads
// shard in term, advertising ad. It is written, synced, unless the shard
// has a record of a later term, or of the same term and node with the
// same advertisement; it reports whether it was written.
func (e *Engine) RecordLeader(shard int, term, node uint64, ad []byte) (bool, error) {
	if shard < 0 || shard > 1<<16 || term == 0 || node == 0 || len(ad) > maxLeaderAd {
		return false, &ConfigError{Setting: "Leader", Reason: fmt.Sprintf("shard %d, term %d, node %d, %d bytes of advertisement", shard, term, node, len(ad))}
	}
	e.adminMu.Lock()
	defer e.adminMu.Unlock()
	if err := e.Failed(); err != nil {
		return false, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	v, err := getSettled(e.st, leaderKey(shard))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return false, err
	default:
		t, n, a, err := decodeLeader(v)
		if err == nil && (t > term || t == term && n == node && string(a) == string(ad)) {
			return false, nil
		}
	}
	var b store.Batch
	b.Set(leaderKey(shard), encodeLeader(term, node, ad))
	if err := e.writeSynced(&b); err != nil {
		return false, err
	}
	return true, nil
}

// StoredLeader returns shard's leader record in st (a copy of shard 0's
// store), read settled when st can, if it has one: one key, read on
// every request a node routes to a shard it holds no copy of.
func StoredLeader(st store.Store, shard int) (ShardLeader, bool, error) {
	if shard < 0 || shard > 1<<16 {
		return ShardLeader{}, false, nil
	}
	v, err := getSettled(st, leaderKey(shard))
	if errors.Is(err, store.ErrNotFound) {
		return ShardLeader{}, false, nil
	}
	if err != nil {
		return ShardLeader{}, false, err
	}
	t, n, a, err := decodeLeader(v)
	if err != nil {
		return ShardLeader{}, false, fmt.Errorf("leader record of shard %d: %w", shard, err)
	}
	return ShardLeader{Shard: shard, Term: t, Node: n, Ad: append([]byte(nil), a...)}, true, nil
}
