// Package advisor checks each queue's configuration against what the
// broker observes and says, per check, green, yellow or red with a
// one-line reason (dlq-practice §16, the design-canvas checks run on real
// configuration and metrics).
//
// Check reads the engine's queue settings and counters itself; what only a
// running broker knows (processing times, receives over a recent window,
// consumer prefetch, which alert rules cover which queue) comes in Stats,
// which the dashboard fills from its samples. A check without the data it
// needs is skipped, never guessed: a finding is always backed by a number.
//
// The checks:
//
//	check              green when                                              otherwise
//	visibility         visibility timeout >= 6 × observed p99 processing time  red below p99 (duplicates), yellow below 6 × p99 or wildly above it
//	max_receive_count  maxReceiveCount in 3–10                                 yellow
//	dlq                a consumer-facing queue has a dead-letter queue         yellow; red when it is redelivering
//	dlq_consumers      no recent receives on a dead-letter queue               yellow
//	dlq_retention      DLQ retention longer than each source's                 yellow when equal, red when shorter
//	dlq_alert          an alert rule watches the DLQ (when alerts are known)   yellow
//	dlq_owner          the DLQ has an "owner" tag (DLQ-72)                     yellow
//	dlq_shared         the DLQ serves one consumer group (DLQ-60)              red when sources of different groups share it
//	fifo_dlq_order     a FIFO queue's DLQ is acknowledged to break order       yellow without the fifo-dlq-ack tag (DLQ-133)
//	prefetch           consumer prefetch in 1–50 (when known)                  yellow to 200, red beyond or unlimited
//	fifo_groups        a FIFO backlog spread over more than one group          yellow with one group
//	retention          oldest message well inside retention; delay < retention yellow at 80 %, red at 95 % on a DLQ or delay >= retention
package advisor

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// Verdict is a finding's colour.
type Verdict string

// Verdicts, from good to bad.
const (
	Green  Verdict = "green"
	Yellow Verdict = "yellow"
	Red    Verdict = "red"
)

// Check names, as they appear in findings.
const (
	CheckVisibility      = "visibility"
	CheckMaxReceiveCount = "max_receive_count"
	CheckDLQ             = "dlq"
	CheckDLQConsumers    = "dlq_consumers"
	CheckDLQRetention    = "dlq_retention"
	CheckDLQAlert        = "dlq_alert"
	CheckDLQOwner        = "dlq_owner"
	CheckDLQShared       = "dlq_shared"
	CheckFIFODLQOrder    = "fifo_dlq_order"
	CheckPrefetch        = "prefetch"
	CheckFIFOGroups      = "fifo_groups"
	CheckRetention       = "retention"
)

// Thresholds of the checks.
const (
	MinMaxReceiveCount = 3
	MaxMaxReceiveCount = 10
	// VisibilityHeadroom is how many times the p99 processing time the
	// visibility timeout should be (dlq-practice §16: ideally >= 6 × p99).
	VisibilityHeadroom = 6
	// MinProcessingSamples is how many deleted messages a queue needs
	// before its p99 is trusted.
	MinProcessingSamples = 20
	MaxPrefetch          = 50
	FarPrefetch          = 200
	// FIFOGroupSample is how many queued messages of a FIFO queue are
	// looked at to count its message groups.
	FIFOGroupSample = 1000
	// MinFIFOBacklog is the backlog under which a single group is not
	// worth a finding.
	MinFIFOBacklog = 10
	// OwnerTag is the queue tag that names a DLQ's owner.
	OwnerTag = "owner"
)

// Finding is one check's verdict on one queue.
type Finding struct {
	Queue   string  `json:"queue"`
	Check   string  `json:"check"`
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason"`
	// Fix names the change that resolves a yellow or red finding: the
	// attribute and the command that sets it, or the sluice command to
	// run. Empty on green findings.
	Fix string `json:"fix,omitempty"`
}

// Stats is what the broker observed, for the checks that need more than
// configuration. Every field is optional: a nil map or a zero value skips
// the checks that need it.
type Stats struct {
	// Now is the time ages are measured at; zero: time.Now (a broker on a
	// fake clock passes its clock's time).
	Now time.Time
	// Window is the span Received covers (for wording only).
	Window time.Duration
	Queues map[string]QueueStats
	// AlertRules lists, per queue, the alert rules evaluated for it. Nil
	// means "not known" (the dlq_alert check is skipped); an empty map
	// means no queue is watched.
	AlertRules map[string][]string
}

// QueueStats is one queue's observations.
type QueueStats struct {
	// P99 is the 99th percentile of processing time (receive to delete)
	// over ProcessingSamples deleted messages.
	P99               time.Duration
	ProcessingSamples int
	// Received and Redelivered count receives within Stats.Window.
	Received, Redelivered uint64
	// Prefetch is the largest consumer prefetch seen on the queue; 0 when
	// unknown (SQS has no prefetch; the AMQP front-end will report it).
	Prefetch int
	// PrefetchUnlimited is true when a consumer asked for no limit.
	PrefetchUnlimited bool
}

// Check runs every check on every queue of eng and returns the findings,
// sorted by queue, then worst verdict first, then check name.
func Check(eng *engine.Engine, stats Stats) []Finding {
	now := stats.Now
	if now.IsZero() {
		now = time.Now()
	}
	// Queues deleted since the listing, or unread because the store
	// failed, get no advice.
	snap := eng.Snapshot()
	names := make([]string, 0, len(snap.Infos))
	infos := make(map[string]engine.QueueInfo, len(snap.Infos))
	for _, info := range snap.Infos {
		names = append(names, info.Name)
		infos[info.Name] = info
	}
	sources := eng.DeadLetterQueues() // dlq → sources, AMQP dead-letter exchanges included
	c := &checker{eng: eng, stats: stats, now: now, infos: infos, sources: sources}
	for _, n := range names {
		info, ok := infos[n]
		if !ok {
			continue
		}
		c.queue(info)
	}
	SortFindings(c.out)
	return c.out
}

// SortFindings sorts findings as Check returns them: by queue, the worst
// verdict first, then by check.
func SortFindings(findings []Finding) {
	sort.SliceStable(findings, func(i, j int) bool {
		a, b := findings[i], findings[j]
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		if ra, rb := rank(a.Verdict), rank(b.Verdict); ra != rb {
			return ra > rb
		}
		return a.Check < b.Check
	})
}

// Worst returns the worst verdict among findings (Green when empty).
func Worst(findings []Finding) Verdict {
	w := Green
	for _, f := range findings {
		if rank(f.Verdict) > rank(w) {
			w = f.Verdict
		}
	}
	return w
}

func rank(v Verdict) int {
	switch v {
	case Red:
		return 2
	case Yellow:
		return 1
	}
	return 0
}

type checker struct {
	eng     QueueReader
	stats   Stats
	now     time.Time
	infos   map[string]engine.QueueInfo
	sources map[string][]string
	out     []Finding
}

func (c *checker) add(q, check string, v Verdict, format string, args ...any) {
	f := Finding{Queue: q, Check: check, Verdict: v, Reason: fmt.Sprintf(format, args...)}
	if v != Green {
		f.Fix = fixFor(check, q)
	}
	c.out = append(c.out, f)
}

func (c *checker) queue(info engine.QueueInfo) {
	q := info.Name
	cfg := &info.Config
	st := c.stats.Queues[q]
	isDLQ := len(c.sources[q]) > 0

	c.visibility(q, cfg, st)
	if isDLQ {
		c.dlq(info, st)
		c.sharedDLQ(q)
	} else {
		c.deadLetterPolicy(q, cfg, st)
	}
	c.prefetch(q, st)
	if cfg.FIFO {
		c.fifoGroups(info)
		c.fifoDLQ(info)
	}
	c.retention(info, isDLQ)
}

// visibility: the lease must outlast processing, or a second consumer gets
// the message while the first is still working on it.
func (c *checker) visibility(q string, cfg *engine.QueueConfig, st QueueStats) {
	if st.ProcessingSamples < MinProcessingSamples || st.P99 <= 0 {
		return
	}
	vis, p99 := cfg.Visibility, st.P99
	switch {
	case vis < p99:
		c.add(q, CheckVisibility, Red, "visibility timeout %v is shorter than the observed p99 processing time %v: duplicate deliveries are coming",
			short(vis), short(p99))
	case vis < VisibilityHeadroom*p99:
		c.add(q, CheckVisibility, Yellow, "visibility timeout %v is under %d× the p99 processing time %v: a slow tail will be redelivered while still in progress",
			short(vis), VisibilityHeadroom, short(p99))
	case vis > 100*p99 && vis > 5*time.Minute:
		c.add(q, CheckVisibility, Yellow, "visibility timeout %v is over 100× the p99 processing time %v: a crashed consumer's messages wait that long to be retried",
			short(vis), short(p99))
	default:
		c.add(q, CheckVisibility, Green, "visibility timeout %v covers the p99 processing time %v %.0f× over",
			short(vis), short(p99), float64(vis)/float64(p99))
	}
}

// deadLetterPolicy: a consumer-facing queue needs a DLQ and a retry budget
// that lets transient failures recover but stops poison early.
func (c *checker) deadLetterPolicy(q string, cfg *engine.QueueConfig, st QueueStats) {
	d := cfg.DeadLetter
	if d == nil || (!d.Routed && d.Target == "") {
		if st.Redelivered > 0 {
			c.add(q, CheckDLQ, Red, "no dead-letter queue, and %d redeliveries in the last %v: a poison message would loop here forever",
				st.Redelivered, short(c.stats.Window))
		} else {
			c.add(q, CheckDLQ, Yellow, "no dead-letter queue: a poison message would be redelivered until retention drops it")
		}
		return
	}
	if !d.Routed {
		if _, ok := c.infos[d.Target]; !ok {
			c.add(q, CheckDLQ, Red, "dead-letter queue %q does not exist: messages that use up their receives cannot be moved", d.Target)
			return
		}
	}
	target := d.Target
	if d.Routed {
		target = "a routed dead-letter exchange"
	}
	c.add(q, CheckDLQ, Green, "dead-letters into %s", target)
	switch n := d.MaxReceiveCount; {
	case n == 0:
		// No receive limit (AMQP: dead-lettered only when rejected).
	case n < MinMaxReceiveCount:
		c.add(q, CheckMaxReceiveCount, Yellow, "maxReceiveCount %d is under %d: one transient failure (a timeout, a deploy) dead-letters a good message",
			n, MinMaxReceiveCount)
	case n > MaxMaxReceiveCount:
		c.add(q, CheckMaxReceiveCount, Yellow, "maxReceiveCount %d is over %d: a poison message is retried that many times before it is quarantined",
			n, MaxMaxReceiveCount)
	default:
		c.add(q, CheckMaxReceiveCount, Green, "maxReceiveCount %d is within %d–%d", n, MinMaxReceiveCount, MaxMaxReceiveCount)
	}
}

// dlq: a dead-letter queue is a triage area watched by someone, kept
// longer than its sources keep messages, and not consumed.
func (c *checker) dlq(info engine.QueueInfo, st QueueStats) {
	q := info.Name
	if c.stats.Window > 0 && c.stats.Queues != nil {
		if st.Received > 0 {
			c.add(q, CheckDLQConsumers, Yellow, "%d receives in the last %v: a consumer is attached to this dead-letter queue, so failures are drained instead of triaged (browse and redrive instead)",
				st.Received, short(c.stats.Window))
		} else {
			c.add(q, CheckDLQConsumers, Green, "no receives in the last %v", short(c.stats.Window))
		}
	}
	c.dlqRetention(info)
	if c.stats.AlertRules != nil {
		if rules := c.stats.AlertRules[q]; len(rules) == 0 {
			c.add(q, CheckDLQAlert, Yellow, "no alert rule watches this dead-letter queue: a poison wave would go unnoticed (enable the dlq_growth rule)")
		} else {
			c.add(q, CheckDLQAlert, Green, "watched by %d alert rule(s)", len(rules))
		}
	}
	if o := info.Tags[OwnerTag]; o == "" {
		c.add(q, CheckDLQOwner, Yellow, "no %q tag: an unowned DLQ is a landfill; tag it with the team that triages it", OwnerTag)
	} else {
		c.add(q, CheckDLQOwner, Green, "owned by %s", o)
	}
}

// dlqRetention: a DLQ must keep messages longer than each source does.
func (c *checker) dlqRetention(info engine.QueueInfo) {
	q := info.Name
	for _, src := range c.sources[q] {
		sr := c.infos[src].Config.Retention
		r := info.Config.Retention
		switch {
		case r < sr:
			c.add(q, CheckDLQRetention, Red, "retention %v is shorter than that of its source %s (%v): retention counts from the original send, so dead letters can be dropped as soon as they arrive",
				short(r), src, short(sr))
		case r == sr:
			c.add(q, CheckDLQRetention, Yellow, "retention %v is no longer than that of its source %s: a message dead-lettered late is dropped soon after; make the DLQ's longer",
				short(r), src)
		default:
			c.add(q, CheckDLQRetention, Green, "retention %v is longer than that of its source %s (%v)", short(r), src, short(sr))
		}
	}
}

func (c *checker) prefetch(q string, st QueueStats) {
	switch p := st.Prefetch; {
	case st.PrefetchUnlimited:
		c.add(q, CheckPrefetch, Red, "a consumer has unlimited prefetch: one consumer can hoard the backlog while others idle, and a crash redelivers all of it")
	case p == 0:
	case p > FarPrefetch:
		c.add(q, CheckPrefetch, Red, "prefetch %d is far above %d: messages wait in one consumer's buffer while others idle", p, MaxPrefetch)
	case p > MaxPrefetch:
		c.add(q, CheckPrefetch, Yellow, "prefetch %d is above %d: more buffered than needed to hide the round trip", p, MaxPrefetch)
	default:
		c.add(q, CheckPrefetch, Green, "prefetch %d is within 1–%d", p, MaxPrefetch)
	}
}

// fifoGroups counts the message groups of a FIFO queue's backlog: with one
// group only one message is in flight at a time. The engine does not
// report its group count, so up to FIFOGroupSample queued messages are
// browsed (browsing changes nothing).
func (c *checker) fifoGroups(info engine.QueueInfo) {
	backlog := info.Visible + info.InFlight + info.Delayed
	if backlog < MinFIFOBacklog {
		return
	}
	page, err := c.eng.Browse(info.Name, engine.Filter{}, 0, FIFOGroupSample)
	if err != nil {
		return
	}
	groups := make(map[string]bool)
	for _, m := range page.Messages {
		groups[m.GroupID] = true
	}
	seen := len(page.Messages)
	if len(groups) == 1 {
		c.add(info.Name, CheckFIFOGroups, Yellow, "all %d queued messages looked at are in one message group: FIFO delivers one at a time per group, so throughput is one consumer's; use a group per ordering key",
			seen)
		return
	}
	c.add(info.Name, CheckFIFOGroups, Green, "%d message groups among %d queued messages", len(groups), seen)
}

// retention: messages near the end of retention are about to be dropped
// (on a DLQ: lost before triage), and a delay as long as the retention
// drops every message before it is delivered.
func (c *checker) retention(info engine.QueueInfo, isDLQ bool) {
	q, r := info.Name, info.Config.Retention
	if r <= 0 {
		return
	}
	if d := info.Config.Delay; d >= r {
		c.add(q, CheckRetention, Red, "delay %v is not shorter than retention %v: messages expire before they can be delivered", short(d), short(r))
		return
	}
	if info.OldestSentAt.IsZero() {
		return
	}
	age := max(0, c.now.Sub(info.OldestSentAt))
	frac := float64(age) / float64(r)
	what := "messages"
	if isDLQ {
		what = "dead letters"
	}
	switch {
	case frac >= 0.95 && isDLQ:
		c.add(q, CheckRetention, Red, "the oldest message is %v old, %.0f%% of retention %v: %s are being lost before triage", short(age), 100*frac, short(r), what)
	case frac >= 0.8:
		c.add(q, CheckRetention, Yellow, "the oldest message is %v old, %.0f%% of retention %v: %s will soon be dropped", short(age), 100*frac, short(r), what)
	default:
		c.add(q, CheckRetention, Green, "the oldest message is %v old, %.0f%% of retention %v", short(age), 100*frac, short(r))
	}
}

// short renders a duration compactly (1.5s, 30s, 4m0s → 4m, 96h0m0s → 4d).
func short(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.Round(time.Second).String()
}
