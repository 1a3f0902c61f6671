package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store"
)

// Shard leaders recorded in shard 0 (ADR 0016): the leader of every shard
// records, on shard 0's leader, that it leads in its term and what it
// advertises, so that a node holding no copy of a shard finds its leader
// in its copy of shard 0.

// ShardLeaderPath is the node-only path (Options.ShardViews) on which
// shard 0's leader takes a LeaderRecordCall.
const ShardLeaderPath = "/sluice/internal/shard/leader"

// maxLeaderRecordBody bounds a LeaderRecordCall's body.
const maxLeaderRecordBody = 16 << 10

// ShardLeader is a shard's leader as recorded in shard 0
// (engine.ShardLeader).
type ShardLeader = engine.ShardLeader

// leaderRecord is a LeaderRecordCall's body.
type leaderRecord struct {
	Shard int             `json:"shard"`
	Term  uint64          `json:"term"`
	Node  uint64          `json:"node"`
	Ad    json.RawMessage `json:"ad"`
}

// LeaderRecordCall is the body of a POST to ShardLeaderPath on shard 0's
// leader: node leads shard in term and advertises ad (a JSON value).
func LeaderRecordCall(shard int, term, node uint64, ad []byte) ([]byte, error) {
	return json.Marshal(leaderRecord{Shard: shard, Term: term, Node: node, Ad: ad})
}

// serveShardLeader records a shard's leader (engine.RecordLeader): 200
// with {"written": bool}, 400 for a body it cannot read, 503 when the
// engine cannot write.
func (s *Server) serveShardLeader(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLeaderRecordBody))
	var rec leaderRecord
	if err == nil {
		err = json.Unmarshal(body, &rec)
	}
	if err != nil {
		http.Error(w, "a leader record: "+err.Error(), http.StatusBadRequest)
		return
	}
	written, err := s.eng.RecordLeader(rec.Shard, rec.Term, rec.Node, rec.Ad)
	var ce *engine.ConfigError
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Written bool `json:"written"`
		}{written})
	case errors.As(err, &ce):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}

// StoredLeader returns the leader recorded for shard in st (a copy of
// shard 0's store), if any (engine.StoredLeader).
func StoredLeader(st store.Store, shard int) (ShardLeader, bool, error) {
	return engine.StoredLeader(st, shard)
}
