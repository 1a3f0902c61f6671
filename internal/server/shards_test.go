package server

import (
	"testing"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/httpbody"
)

// TestSharedDividesTheNodesBounds: a server that is one of three on its
// node gets a third of each memory bound and of the queue cap, of the
// defaults when unset; bounds turned off stay off; the HTTP body budget
// never drops below one largest request.
func TestSharedDividesTheNodesBounds(t *testing.T) {
	o := DefaultOptions()
	s := o.shared(3)
	if s.BodyMemoryBudget != engine.DefaultBodyMemoryBudget/3 || s.ReadyMemoryBudget != engine.DefaultReadyMemoryBudget/3 || s.HTTPBodyBudget != httpbody.DefaultLimit/3 || s.MaxQueues != (engine.DefaultMaxQueues+2)/3 {
		t.Fatalf("defaults shared by 3: body %d, http %d, queues %d", s.BodyMemoryBudget, s.HTTPBodyBudget, s.MaxQueues)
	}
	if w := memoryWatermark(0); w > 0 && s.MemoryHighWatermark != w/3 {
		t.Fatalf("default watermark %d shared by 3: %d", w, s.MemoryHighWatermark)
	}
	o.BodyMemoryBudget, o.MemoryHighWatermark, o.MaxQueues, o.HTTPBodyBudget = -1, -1, -1, 6<<20
	s = o.shared(3)
	if s.BodyMemoryBudget != -1 || s.MemoryHighWatermark != -1 || s.MaxQueues != -1 || s.HTTPBodyBudget != MaxSQSRequestBody {
		t.Fatalf("off stays off, http floor: %+v", s)
	}
	o.BodyMemoryBudget, o.MemoryHighWatermark, o.MaxQueues = 300, 900, 10
	s = o.shared(3)
	if s.BodyMemoryBudget != 100 || s.MemoryHighWatermark != 300 || s.MaxQueues != 4 {
		t.Fatalf("configured values shared by 3: body %d, watermark %d, queues %d", s.BodyMemoryBudget, s.MemoryHighWatermark, s.MaxQueues)
	}
}
