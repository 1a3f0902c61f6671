package advisor

import (
	"sort"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/engine"
)

// GroupTag is the queue tag that says which consumer group a queue serves.
// Source queues that share a dead-letter queue must carry the same value;
// without the tag every source is its own group.
const GroupTag = "consumer-group"

// SharedSources returns the groups of sources (by GroupTag; an untagged
// source is a group of its own) when they are more than one, so that one
// dead-letter queue serves unrelated consumers (DLQ-60). tags gives a
// source's tags. The result is sorted; nil when the DLQ is not shared.
func SharedSources(sources []string, tags func(string) map[string]string) []string {
	groups := map[string][]string{}
	for _, s := range sources {
		g := tags(s)[GroupTag]
		if g == "" {
			g = "queue " + s
		} else {
			g = GroupTag + " " + g
		}
		groups[g] = append(groups[g], s)
	}
	if len(groups) < 2 {
		return nil
	}
	out := make([]string, 0, len(groups))
	for g, srcs := range groups {
		sort.Strings(srcs)
		if strings.HasPrefix(g, "queue ") {
			out = append(out, srcs[0])
		} else {
			out = append(out, g+" ("+strings.Join(srcs, ", ")+")")
		}
	}
	sort.Strings(out)
	return out
}

// sharedDLQ: one dead-letter queue per consumer group. "One group's DLQ is
// noise to another": a shared one mixes failures that different teams
// triage and redrive, and a redrive to origin then touches both.
func (c *checker) sharedDLQ(q string) {
	srcs := c.sources[q]
	groups := SharedSources(srcs, func(s string) map[string]string { return c.infos[s].Tags })
	if groups == nil {
		c.add(q, CheckDLQShared, Green, "serves one consumer group")
		return
	}
	c.add(q, CheckDLQShared, Red, "shared by %d unrelated consumer groups: %s. Give each its own dead-letter queue, or tag sources of one group with the same %q",
		len(groups), strings.Join(groups, "; "), GroupTag)
}

// QueueReader is what CreationWarnings reads of the queue engine:
// *engine.Engine, or anything that answers for the queues it names (ADR
// 0015's router).
type QueueReader interface {
	Config(name string) (*engine.QueueConfig, error)
	GetQueue(name string) (engine.QueueInfo, error)
	DeadLetterSources(dlq string) ([]string, error)
	Browse(name string, f engine.Filter, cursor uint64, limit int) (engine.Page, error)
}

var _ QueueReader = (*engine.Engine)(nil)

// CreationWarnings runs the configuration checks that concern queue q
// right after it was created or its dead-letter settings changed, and
// returns those that are not green (DLQ-151): a maxReceiveCount outside
// 3–10, and, when q dead-letters into a queue, whether that DLQ is now
// shared by unrelated sources or keeps messages no longer than q. They are
// warnings, never errors: SQS and AMQP must accept what their protocols
// accept. A queue without a DLQ is not warned about here (at creation a
// DLQ-to-be looks the same); `sluice doctor` reports it. It costs O(1)
// for a queue without a dead-letter target, O(queues) with one.
func CreationWarnings(eng QueueReader, q string) []Finding {
	cfg, err := eng.Config(q)
	if err != nil || cfg.DeadLetter == nil {
		return nil
	}
	c := &checker{eng: eng, now: time.Now(), infos: map[string]engine.QueueInfo{}, sources: map[string][]string{}}
	d := cfg.DeadLetter
	c.infos[q] = engine.QueueInfo{Name: q, Config: *cfg}
	if !d.Routed && d.Target != "" {
		if t, err := eng.GetQueue(d.Target); err == nil {
			c.infos[d.Target] = t
			srcs, _ := eng.DeadLetterSources(d.Target)
			for _, s := range srcs {
				if _, ok := c.infos[s]; !ok {
					if info, err := eng.GetQueue(s); err == nil {
						c.infos[s] = info
					}
				}
				if _, ok := c.infos[s]; ok {
					c.sources[d.Target] = append(c.sources[d.Target], s)
				}
			}
			c.sharedDLQ(d.Target)
			c.dlqRetention(t)
		}
	}
	c.deadLetterPolicy(q, cfg, QueueStats{})
	var out []Finding
	for _, f := range c.out {
		if f.Verdict != Green && f.Check != CheckDLQ {
			out = append(out, f)
		}
	}
	return out
}

// FIFODLQAckTag, set to "true" on a FIFO queue, acknowledges that
// dead-lettering breaks the exact order of its groups.
const FIFODLQAckTag = "fifo-dlq-ack"

// fifoDLQ: on a FIFO queue, dead-lettering a group's head lets the rest of
// the group overtake it, so exact order is broken for an order-critical
// workload (DLQ-133). Flagged until acknowledged with the tag.
func (c *checker) fifoDLQ(info engine.QueueInfo) {
	d := info.Config.DeadLetter
	if d == nil || (d.MaxReceiveCount == 0 && !d.Routed) {
		return
	}
	if info.Tags[FIFODLQAckTag] == "true" {
		c.add(info.Name, CheckFIFODLQOrder, Green, "dead-lettering acknowledged to break the order of a group (%s tag)", FIFODLQAckTag)
		return
	}
	c.add(info.Name, CheckFIFODLQOrder, Yellow, "a dead-lettered message lets the rest of its group overtake it: exact order is broken. If the workload tolerates that, tag the queue %s=true", FIFODLQAckTag)
}
