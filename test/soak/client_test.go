//go:build linux

package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// sqsClient is a small AWS JSON 1.0 client over one shared Transport that
// keeps an idle connection per concurrent caller, so no request after
// warm-up pays for a handshake and 2,000 parked long polls hold 2,000
// connections, as real consumers would.
type sqsClient struct {
	hc   *http.Client
	ep   atomic.Pointer[string] // base URL, ending in "/"
	errs *errorLog
}

func (c *sqsClient) setEndpoint(url string) {
	e := strings.TrimRight(url, "/") + "/"
	c.ep.Store(&e)
}

func (c *sqsClient) endpoint() string { return *c.ep.Load() }

func newSQSClient(endpoint string, conns int, errs *errorLog) *sqsClient {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     5 * time.Minute,
		DisableCompression:  true,
	}
	c := &sqsClient{hc: &http.Client{Transport: tr}, errs: errs}
	c.setEndpoint(endpoint)
	return c
}

// apiError is a non-200 answer.
type apiError struct {
	Status int
	Code   string
	Msg    string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Msg) }

// call POSTs one action. Every failure is recorded in c.errs under op;
// a cancelled context is not a failure and is returned unrecorded.
func (c *sqsClient) call(ctx context.Context, op, action string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.errs.add(op+":transport", err)
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.errs.add(op+":transport", err)
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		ae := &apiError{Status: resp.StatusCode}
		var shape struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(b, &shape)
		ae.Code = shape.Type[strings.LastIndexByte(shape.Type, '#')+1:]
		ae.Msg = shape.Message
		c.errs.addStatus(op, ae)
		return nil, ae
	}
	return b, nil
}

func (c *sqsClient) createQueue(ctx context.Context, name string, attrs map[string]string) (string, error) {
	body, _ := json.Marshal(struct {
		QueueName  string
		Attributes map[string]string `json:",omitempty"`
	}{name, attrs})
	b, err := c.call(ctx, "create", "CreateQueue", body)
	if err != nil {
		return "", fmt.Errorf("create queue %s: %w", name, err)
	}
	var out struct{ QueueUrl string }
	if err := json.Unmarshal(b, &out); err != nil || out.QueueUrl == "" {
		return "", fmt.Errorf("create queue %s: answer %q", name, b)
	}
	return out.QueueUrl, nil
}

// sendBatch sends bodies (which need no JSON escaping: see appendBody)
// and returns the indexes of the acknowledged entries.
func (c *sqsClient) sendBatch(ctx context.Context, url string, bodies [][]byte) ([]int, error) {
	var b []byte
	b = append(b, `{"QueueUrl":"`...)
	b = append(b, url...)
	b = append(b, `","Entries":[`...)
	for i, body := range bodies {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Id":"`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `","MessageBody":"`...)
		b = append(b, body...)
		b = append(b, `"}`...)
	}
	b = append(b, "]}"...)
	out, err := c.call(ctx, "send", "SendMessageBatch", b)
	if err != nil {
		return nil, err
	}
	var r batchResult
	if err := json.Unmarshal(out, &r); err != nil {
		c.errs.add("send:decode", err)
		return nil, err
	}
	c.errs.addFailed("send", r.Failed)
	ok := make([]int, 0, len(r.Successful))
	for _, s := range r.Successful {
		i, err := strconv.Atoi(s.Id)
		if err != nil || i < 0 || i >= len(bodies) {
			c.errs.add("send:decode", fmt.Errorf("entry id %q", s.Id))
			continue
		}
		ok = append(ok, i)
	}
	return ok, nil
}

type batchResult struct {
	Successful []struct{ Id string }
	Failed     []batchFailure
}

type batchFailure struct {
	Id          string
	Code        string
	Message     string
	SenderFault bool
}

type sqsMessage struct {
	MessageId     string
	ReceiptHandle string
	Body          string
}

// receive asks for up to max messages, waiting up to wait seconds. When
// parked is not nil it counts the request as parked from the moment it
// has been written until its answer arrives.
func (c *sqsClient) receive(ctx context.Context, url string, max, wait int, parked *atomic.Int64) ([]sqsMessage, error) {
	body, _ := json.Marshal(struct {
		QueueUrl            string
		MaxNumberOfMessages int
		WaitTimeSeconds     int
	}{url, max, wait})
	if parked != nil {
		var wrote atomic.Bool
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) {
				if wrote.CompareAndSwap(false, true) {
					parked.Add(1)
				}
			},
		})
		defer func() {
			if wrote.Load() {
				parked.Add(-1)
			}
		}()
	}
	out, err := c.call(ctx, "receive", "ReceiveMessage", body)
	if err != nil {
		return nil, err
	}
	var r struct{ Messages []sqsMessage }
	if err := json.Unmarshal(out, &r); err != nil {
		c.errs.add("receive:decode", err)
		return nil, err
	}
	return r.Messages, nil
}

// deleteBatch deletes by receipt handle and returns the indexes of the
// acknowledged deletes.
func (c *sqsClient) deleteBatch(ctx context.Context, url string, handles []string) ([]int, error) {
	type entry struct{ Id, ReceiptHandle string }
	req := struct {
		QueueUrl string
		Entries  []entry
	}{QueueUrl: url}
	for i, h := range handles {
		req.Entries = append(req.Entries, entry{strconv.Itoa(i), h})
	}
	body, _ := json.Marshal(req)
	out, err := c.call(ctx, "delete", "DeleteMessageBatch", body)
	if err != nil {
		return nil, err
	}
	var r batchResult
	if err := json.Unmarshal(out, &r); err != nil {
		c.errs.add("delete:decode", err)
		return nil, err
	}
	c.errs.addFailed("delete", r.Failed)
	ok := make([]int, 0, len(r.Successful))
	for _, s := range r.Successful {
		if i, err := strconv.Atoi(s.Id); err == nil && i >= 0 && i < len(handles) {
			ok = append(ok, i)
		}
	}
	return ok, nil
}

// queueDepth is one queue of GET /sluice/v1/queues.
type queueDepth struct {
	Name     string `json:"name"`
	Visible  int64  `json:"visible"`
	Inflight int64  `json:"inflight"`
	Delayed  int64  `json:"delayed"`
	Waiting  int64  `json:"waiting"` // receives parked on it, as the broker counts them
}

func (c *sqsClient) depths(ctx context.Context) (map[string]queueDepth, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint()+"sluice/v1/queues", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		ae := &apiError{Status: resp.StatusCode, Msg: string(b)}
		c.errs.addStatus("admin", ae)
		return nil, ae
	}
	var out struct {
		Queues []queueDepth `json:"queues"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	m := make(map[string]queueDepth, len(out.Queues))
	for _, q := range out.Queues {
		m[q.Name] = q
	}
	return m, nil
}

// goMem is the broker's Go memory as /metrics reports it.
type goMem struct {
	// heap is the heap allocated now (live plus garbage not yet
	// collected); goal is the next GC's goal. With GOGC=100, which the
	// server runs with once recovered, the goal is twice the heap that
	// survived the last collection, so goal/2 estimates the live heap.
	heap, goal int64
	stack      int64 // goroutine stacks in use
}

// goMemory reads the broker's goMem from /metrics.
func (c *sqsClient) goMemory(ctx context.Context) (goMem, error) {
	var m goMem
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint()+"metrics", nil)
	if err != nil {
		return m, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return m, err
	}
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		var p *int64
		switch name {
		case "go_memstats_heap_alloc_bytes":
			p = &m.heap
		case "go_memstats_next_gc_bytes":
			p = &m.goal
		case "go_memstats_stack_inuse_bytes":
			p = &m.stack
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return m, fmt.Errorf("/metrics %s: %w", name, err)
		}
		*p = int64(f)
	}
	if m.heap == 0 || m.goal == 0 {
		return m, errors.New("/metrics: no go_memstats heap figures")
	}
	return m, nil
}

// errorLog counts failures by "op:kind" and keeps the first few of each.
type errorLog struct {
	mu       sync.Mutex
	counts   map[string]uint64
	examples map[string]string
	server5x atomic.Uint64 // HTTP 5xx answers and server-fault batch entries
}

func newErrorLog() *errorLog {
	return &errorLog{counts: map[string]uint64{}, examples: map[string]string{}}
}

func (l *errorLog) add(key string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[key]++
	if _, ok := l.examples[key]; !ok {
		l.examples[key] = fmt.Sprintf("%s (at %s)", err, time.Now().Format("15:04:05.000"))
	}
}

func (l *errorLog) addStatus(op string, e *apiError) {
	if e.Status >= 500 {
		l.server5x.Add(1)
	}
	l.add(fmt.Sprintf("%s:HTTP%d %s", op, e.Status, e.Code), e)
}

func (l *errorLog) addFailed(op string, failed []batchFailure) {
	for _, f := range failed {
		if !f.SenderFault {
			l.server5x.Add(1)
		}
		l.add(fmt.Sprintf("%s:entry %s", op, f.Code), errors.New(f.Message))
	}
}

func (l *errorLog) total() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint64
	for _, c := range l.counts {
		n += c
	}
	return n
}

func (l *errorLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.counts))
	for k := range l.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%-40s %8d  e.g. %s", k, l.counts[k], l.examples[k]))
	}
	return out
}

// Process and machine figures from /proc.

// procRSS is VmRSS of pid in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "123456 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// procCPU is utime+stime of pid (all threads). USER_HZ is 100 on every
// Linux architecture that exports it to user space.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	s, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// diskUsage is the space allocated to the files under dir (as du counts
// it) and their apparent size. Files that vanish during the walk (pebble
// deleting an obsolete sstable) are skipped.
func diskUsage(dir string) (alloc, apparent int64, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		apparent += info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			alloc += st.Blocks * 512
		}
		return nil
	})
	return alloc, apparent, err
}

// diskFiles summarises the data directory by kind of file, for the report
// on what holds space after the drain.
func diskFiles(dir string) string {
	kinds := map[string][2]int64{} // kind → count, bytes
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		k := filepath.Ext(p)
		if k == "" {
			k = d.Name()
			if i := strings.IndexAny(k, "-0123456789"); i > 0 {
				k = k[:i]
			}
		}
		v := kinds[k]
		v[0]++
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			v[1] += st.Blocks * 512
		}
		kinds[k] = v
		return nil
	})
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, " %s×%d=%s", k, kinds[k][0], mib(kinds[k][1]))
	}
	return strings.TrimSpace(sb.String())
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
}

// fsType names the filesystem holding dir, and whether it is tmpfs.
func fsType(dir string) (string, bool, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "", false, err
	}
	const tmpfsMagic, ramfsMagic, overlayMagic = 0x01021994, 0x858458f6, 0x794c7630
	switch st.Type {
	case tmpfsMagic:
		return "tmpfs", true, nil
	case ramfsMagic:
		return "ramfs", true, nil
	case overlayMagic:
		return "overlayfs", false, nil
	}
	return fmt.Sprintf("0x%x", st.Type), false, nil
}

// saveHeapProfile saves the broker's heap profile, from its debug
// listener, as SLUICE_SOAK_PROFILES/heap-<phase>.pb.gz, when that is set.
func (s *soak) saveHeapProfile(phase string) {
	if s.cfg.profiles == "" {
		return
	}
	addr := s.server().Debug
	if addr == "" {
		s.t.Logf("heap profile: the broker has no debug listener")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap", nil)
	if err != nil {
		s.t.Logf("heap profile: %v", err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Logf("heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err == nil {
		path := filepath.Join(s.cfg.profiles, "heap-"+phase+".pb.gz")
		if err = os.MkdirAll(s.cfg.profiles, 0o755); err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		if err == nil {
			s.t.Logf("heap profile at the end of %s: %s", phase, path)
		}
	}
	if err != nil {
		s.t.Logf("heap profile: %v", err)
	}
}
