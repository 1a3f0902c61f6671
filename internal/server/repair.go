package server

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"

	"github.com/sluicemq/sluice/internal/engine"
	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// Repair opens the store in dataDir (which fails while a broker holds it)
// and runs engine.Repair on it, printing what it found to w: the records
// recovery cannot explain, which make the broker refuse to start, and the
// leftovers of deleted queues, which recovery drops by itself. With dryRun
// it changes nothing; otherwise it deletes exactly those records.
func Repair(dataDir string, dryRun bool, w io.Writer, log *slog.Logger) error {
	if _, err := os.Stat(dataDir); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	st, err := pebblestore.Open(dataDir, pebblestore.Options{Logger: log})
	if err != nil {
		return err
	}
	rep, err := engine.Repair(st, log, dryRun)
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	verb := "would drop"
	if rep.Dropped {
		verb = "dropped"
	}
	fmt.Fprintf(w, "%d record(s) recovery cannot explain:\n", len(rep.Unexplained))
	for _, u := range rep.Unexplained {
		fmt.Fprintf(w, "  %s: %s\n", verb, u)
	}
	ids := make([]uint32, 0, len(rep.Leftovers))
	for id := range rep.Leftovers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		fmt.Fprintf(w, "  %s: %d record(s) of deleted queue id %d (writes that raced its delete)\n", verb, rep.Leftovers[id], id)
	}
	switch {
	case len(rep.Unexplained) == 0 && len(ids) == 0:
		fmt.Fprintln(w, "nothing to repair")
	case dryRun:
		fmt.Fprintln(w, "dry run: nothing was changed; run again without --dry-run to drop these records")
	}
	return nil
}
