package alerts

import (
	"encoding/json"
	"strings"
	"time"
)

// Alert state survives a restart. Every transition of an alert to firing
// writes it to the engine's metadata (namespace "alerts"), durably, before
// its notification goes out; a transition away from firing deletes it. At
// Run the firing alerts are loaded back, so the first evaluation after a
// restart neither pages again for what was already firing nor forgets it:
// it keeps firing if its condition still holds and resolves (notifying)
// otherwise. The dlq_growth rule's arrivals are saved when Run ends and
// loaded with the alerts, so a planned restart keeps the window; after a
// crash the window starts empty.

const (
	metaAlerts   = "alerts"
	metaArrivals = "alerts-arrivals"
)

type alertRecord struct {
	V        int       `json:"v"`
	State    State     `json:"state"`
	StartsAt time.Time `json:"startsAt"`
}

type arrivalsRecord struct {
	V       int      `json:"v"`
	Buckets []bucket `json:"buckets"`
}

func (b bucket) MarshalJSON() ([]byte, error) { return json.Marshal([2]int64{b.minute, int64(b.n)}) }

func (b *bucket) UnmarshalJSON(data []byte) error {
	var v [2]int64
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	b.minute, b.n = v[0], int(v[1])
	return nil
}

func metaAlertKey(k key) string { return k.queue + "\x00" + k.rule + "\x00" + k.severity }

// persist records the firing alerts among changed and forgets the others.
func (m *Manager) persist(changed []Notification, starts map[key]time.Time) {
	eng := m.eng
	if eng == nil {
		return
	}
	for _, n := range changed {
		k := key{n.Queue, n.Rule, n.Severity}
		var err error
		if n.Status == StatusFiring {
			rec, _ := json.Marshal(alertRecord{V: 1, StartsAt: starts[k], State: State{
				Queue: n.Queue, Rule: n.Rule, Severity: n.Severity, Status: StatusFiring,
				Value: n.Value, Threshold: n.Threshold, Since: starts[k], Message: n.Message,
			}})
			err = eng.PutMeta(metaAlerts, metaAlertKey(k), rec)
		} else {
			err = eng.DeleteMeta(metaAlerts, metaAlertKey(k))
		}
		if err != nil {
			m.log.Warn("cannot persist alert state; it will not survive a restart", "rule", n.Rule, "queue", n.Queue, "err", err)
		}
	}
}

// load reads back the firing alerts and the saved arrivals. Bad records
// are skipped with a warning: alert state is a convenience, not data.
func (m *Manager) load() {
	eng := m.eng
	m.mu.Lock()
	defer m.mu.Unlock()
	err := eng.ScanMeta(metaAlerts, func(k string, v []byte) error {
		var rec alertRecord
		parts := strings.Split(k, "\x00")
		if json.Unmarshal(v, &rec) != nil || rec.V != 1 || len(parts) != 3 || rec.State.Status != StatusFiring {
			m.log.Warn("skipping an unreadable saved alert", "key", strings.ReplaceAll(k, "\x00", "/"))
			return nil
		}
		m.alerts[key{parts[0], parts[1], parts[2]}] = &alert{State: rec.State, startsAt: rec.StartsAt}
		return nil
	})
	if err == nil {
		err = eng.ScanMeta(metaArrivals, func(q string, v []byte) error {
			var rec arrivalsRecord
			if json.Unmarshal(v, &rec) != nil || rec.V != 1 {
				return nil
			}
			m.arrivals.restore(q, rec.Buckets)
			return nil
		})
	}
	if err != nil {
		m.log.Warn("cannot load saved alert state", "err", err)
	}
}

// saveArrivals writes the growth rule's arrivals, at the end of Run.
func (m *Manager) saveArrivals() {
	eng := m.eng
	for q, ring := range m.arrivals.snapshot() {
		rec, _ := json.Marshal(arrivalsRecord{V: 1, Buckets: ring})
		if err := eng.PutMeta(metaArrivals, q, rec); err != nil {
			m.log.Warn("cannot save dead-letter arrivals for the growth alert", "queue", q, "err", err)
			return
		}
	}
}
