package testlog

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites: records logged from many goroutines all arrive,
// whole, while the test reads (run under -race to check the locking).
func TestConcurrentWrites(t *testing.T) {
	log, buf := New(slog.LevelInfo)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				log.Info("hello", "g", i, "n", j)
				_ = buf.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "msg=hello"); n != 400 {
		t.Fatalf("%d records, want 400", n)
	}
	log.Debug("below the level")
	if strings.Contains(buf.String(), "below the level") {
		t.Fatal("a record below the level was written")
	}
}
