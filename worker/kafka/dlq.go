package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/worker/dlq"
)

// DLQ is a dead-letter topic as a dlq.Store. A topic is a log: a record
// leaves it only by retention, so "removed" means behind the redrive
// group's committed offset. List starts there; Redrive commits past the
// entry once its copy is acknowledged.
type DLQ struct {
	cl     *kgo.Client
	adm    *kadm.Client
	topic  string
	group  string
	target string
}

// NewDLQ returns the Store for dead-letter topic topic, with its redrive
// cursor in consumer group group ("": "sluice-redrive." + topic).
// Redrive produces to target; "" sends each entry back to the topic it
// came from, which every group of that topic reads: give a group a retry
// topic of its own when several share one. Close it when done.
func NewDLQ(seeds []string, topic, group, target string, opts ...kgo.Opt) (*DLQ, error) {
	if group == "" {
		group = "sluice-redrive." + topic
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &DLQ{cl: cl, adm: kadm.NewClient(cl), topic: topic, group: group, target: target}, nil
}

// Close closes the client.
func (d *DLQ) Close() { d.cl.Close() }

// cursor is the next offset to read, per partition, encoded "p:o,p:o".
func parseCursor(s string) (map[int32]int64, error) {
	out := map[int32]int64{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		p, o, ok := strings.Cut(part, ":")
		pi, err1 := strconv.ParseInt(p, 10, 32)
		oi, err2 := strconv.ParseInt(o, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("kafka: bad cursor %q", s)
		}
		out[int32(pi)] = oi
	}
	return out, nil
}

func formatCursor(c map[int32]int64) string {
	ps := make([]int, 0, len(c))
	for p := range c {
		ps = append(ps, int(p))
	}
	sort.Ints(ps)
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", p, c[int32(p)])
	}
	return b.String()
}

// List reads from the cursor ("": the redrive group's committed offsets,
// or the start of each partition) up to the end offsets of now, without
// committing anything.
func (d *DLQ) List(ctx context.Context, cursor string, max int) ([]dlq.Entry, string, error) {
	from, err := parseCursor(cursor)
	if err != nil {
		return nil, cursor, err
	}
	ends, err := d.adm.ListEndOffsets(ctx, d.topic)
	if err != nil {
		return nil, cursor, err
	}
	if err := ends.Error(); err != nil {
		return nil, cursor, err
	}
	if cursor == "" {
		starts, err := d.adm.ListStartOffsets(ctx, d.topic)
		if err != nil {
			return nil, cursor, err
		}
		committed, err := d.adm.FetchOffsets(ctx, d.group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			err = nil // nothing redriven yet
		}
		if err != nil {
			return nil, cursor, err
		}
		starts.Each(func(o kadm.ListedOffset) { from[o.Partition] = o.Offset })
		committed.Each(func(o kadm.OffsetResponse) {
			if o.Topic == d.topic && o.Err == nil && o.At >= 0 {
				from[o.Partition] = max64(from[o.Partition], o.At)
			}
		})
	}
	want := map[int32]kgo.Offset{}
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		end[o.Partition] = o.Offset
		if from[o.Partition] < o.Offset {
			want[o.Partition] = kgo.NewOffset().At(from[o.Partition])
		} else if _, ok := from[o.Partition]; !ok {
			from[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil, formatCursor(from), nil
	}
	rd, err := kgo.NewClient(append(d.cl.Opts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{d.topic: want}))...)
	if err != nil {
		return nil, cursor, err
	}
	defer rd.Close()
	var out []dlq.Entry
	pending := len(want)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for pending > 0 && len(out) < max {
		fs := rd.PollRecords(pctx, max-len(out))
		if err := pctx.Err(); err != nil {
			return out, formatCursor(from), fmt.Errorf("kafka: reading %s: %w", d.topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return out, formatCursor(from), ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if len(out) >= max || r.Offset < from[r.Partition] || from[r.Partition] >= end[r.Partition] {
				return
			}
			out = append(out, entry(r))
			from[r.Partition] = r.Offset + 1
			if from[r.Partition] >= end[r.Partition] {
				pending--
			}
		})
	}
	return out, formatCursor(from), nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func entry(r *kgo.Record) dlq.Entry {
	fields := map[string]string{}
	e := dlq.Entry{ID: fmt.Sprintf("%d/%d", r.Partition, r.Offset), Key: string(r.Key), Body: r.Value, Attributes: map[string]string{}}
	for _, h := range r.Headers {
		fields[h.Key] = string(h.Value)
		if !dlq.IsContextField(h.Key) {
			e.Attributes[h.Key] = string(h.Value)
		}
	}
	e.Context, e.Valid = dlq.ParseContext(fields)
	return e
}

// Redrive produces the copy (same key, context stripped, redrive count +
// 1), waits for the acknowledgement, then commits the redrive group past
// the entry. Entries before it in its partition that a filter skipped are
// passed over too: they stay in the log, but List no longer shows them.
func (d *DLQ) Redrive(ctx context.Context, e dlq.Entry) error {
	ps, os, ok := strings.Cut(e.ID, "/")
	p, err1 := strconv.ParseInt(ps, 10, 32)
	off, err2 := strconv.ParseInt(os, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("kafka: bad entry id %q", e.ID)
	}
	target := d.target
	if target == "" {
		target = e.Context.Origin
	}
	if target == "" {
		return errors.New("kafka: the entry does not say its topic; set a target")
	}
	r := &kgo.Record{Topic: target, Value: e.Body}
	if e.Key != "" {
		r.Key = []byte(e.Key)
	}
	for k, v := range dlq.RedriveFields(e.Attributes, e.Context) {
		if k == HeaderPartition || k == HeaderOffset || k == HeaderTimestamp {
			continue
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	if err := d.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return err
	}
	var offs kadm.Offsets
	offs.AddOffset(d.topic, int32(p), off+1, -1)
	resp, err := d.adm.CommitOffsets(ctx, d.group, offs)
	if err != nil {
		return err
	}
	return resp.Error()
}

var _ dlq.Store = (*DLQ)(nil)
