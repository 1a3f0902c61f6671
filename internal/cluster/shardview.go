package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// A shard's view (GET /sluice/v1/cluster/shards/{shard}): what the
// cluster view (clusterview.go) is for shard 0, for any shard — its
// leader, term and last index, and each member's membership and, from
// the leader's Raft progress, how far its log is behind. The dashboard's
// queue page shows it for the queue's shard, whose leader and members
// are not shard 0's in a cluster with shards. Only shard 0 gathers its
// followers' own reports, so for a shard above 0 a member other than the
// leader has no role, term, commit or applied index in it.

// shardViewPath is the internal path on a shard's leader that answers its
// view (memberInternalRoutes).
const shardViewPath = internalMembersPath + "/view"

// maxShardViewBody bounds a shard's view read from its leader.
const maxShardViewBody = 1 << 20

// shardView assembles shard k's view; ok is false unless this node leads
// the shard. Shard 0's is the cluster view.
func (n *Node) shardView(k int) (ClusterView, bool) {
	if k == 0 {
		return n.view()
	}
	r := n.shards.Shard(k)
	if r == nil {
		return ClusterView{}, false
	}
	st := r.Status()
	if st.Role != "leader" || st.Leader != st.ID {
		return ClusterView{}, false
	}
	return progressView(st, n.opts.Cluster.Factor()), true
}

// serveShardViewInternal answers shard k's view on its leader's internal
// listener; 503 when this node does not lead it.
func (n *Node) serveShardViewInternal(k int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, ok := n.shardView(k)
		if !ok {
			unavailable(w, r, "this node does not lead the shard; retry")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v) // a client gone cannot be told
	}
}

// leaderShardView returns shard k's view: this node's when it leads the
// shard, else its leader's, read over the internal listeners.
func (n *Node) leaderShardView(ctx context.Context, k int) (ClusterView, error) {
	if k == 0 {
		return n.leaderView(ctx)
	}
	if v, ok := n.shardView(k); ok {
		return v, nil
	}
	b, err := n.shardRequest(ctx, k, http.MethodGet, shardViewPath, nil, maxShardViewBody, shardViewWait)
	if err != nil {
		return ClusterView{}, err
	}
	var v ClusterView
	if err := json.Unmarshal(b, &v); err != nil {
		return ClusterView{}, err
	}
	return v, nil
}

// shardViewWait bounds the public request for a shard's view: finding
// its leader and its answer.
const shardViewWait = 2 * time.Second

// serveShardView answers GET /sluice/v1/cluster/shards/{shard} on the
// public listener: the shard's view, 404 for a shard the cluster does
// not have, 503 while no leader of it answers.
func (n *Node) serveShardView(w http.ResponseWriter, r *http.Request) {
	k, err := strconv.Atoi(r.PathValue("shard"))
	if err != nil || k < 0 || k >= n.shards.Len() {
		writeError(w, r, http.StatusNotFound, "NotFound", "Sender",
			"no such shard: want 0 to "+strconv.Itoa(n.shards.Len()-1))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), shardViewWait)
	defer cancel()
	v, err := n.leaderShardView(ctx, k)
	if err != nil {
		unavailable(w, r, "no leader of shard "+strconv.Itoa(k)+" answered with its view; retry: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v) // a client gone cannot be told
}
