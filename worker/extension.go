package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/api"
)

// httpDoer is what both sources' HTTP clients provide.
type httpDoer interface {
	Do(*http.Request) (*http.Response, error)
}

// postFailure sends one failure report to Sluice's extension at url and
// interprets the answer, for both transports. present reports that the
// extension answered, with an outcome or with its own error (mapped to
// ErrNoDeadLetterQueue, ErrLeaseLost or an *ExtensionError). When present
// is false, a nil err means the endpoint clearly has no extension (a 404 or
// a foreign answer), while a non-nil err (transport failure, 5xx) says
// nothing either way.
func postFailure(ctx context.Context, hc httpDoer, url string, report any) (out Outcome, present bool, err error) {
	data, err := json.Marshal(report)
	if err != nil {
		return Outcome{}, false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return Outcome{}, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return Outcome{}, false, fmt.Errorf("worker: failure report: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Outcome{}, false, fmt.Errorf("worker: failure report: %w", err)
	}
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json")
	if resp.StatusCode == http.StatusOK && isJSON {
		// An answer is the extension's when it has deadLettered; a
		// foreign JSON 200 (a proxy, another service) has not.
		var o api.FailureOutcome
		var has map[string]json.RawMessage
		if json.Unmarshal(raw, &has) == nil && has["deadLettered"] != nil && string(has["deadLettered"]) != "null" &&
			json.Unmarshal(raw, &o) == nil {
			out := Outcome{DeadLettered: o.DeadLettered, Target: o.Target, Reported: true}
			if o.VisibleAt != nil {
				out.VisibleAt = *o.VisibleAt
			}
			return out, true, nil
		}
	}
	var ee api.ErrorBody
	if isJSON && json.Unmarshal(raw, &ee) == nil && ee.Error.Code != "" && ee.Error.Code != "NotFound" {
		e := &ExtensionError{Status: resp.StatusCode, Code: ee.Error.Code, Message: ee.Error.Message}
		switch e.Code {
		case "NoDeadLetterQueue":
			return Outcome{}, true, fmt.Errorf("%w (%w)", ErrNoDeadLetterQueue, e)
		case "MessageNotAvailable", "MessageNotInflight", "ReceiptHandleInvalid":
			return Outcome{}, true, fmt.Errorf("%w (%w)", ErrLeaseLost, e)
		}
		return Outcome{}, true, e
	}
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented {
		// A failing proxy or broker says nothing about the extension.
		return Outcome{}, false, fmt.Errorf("worker: failure report: HTTP %d", resp.StatusCode)
	}
	return Outcome{}, false, nil
}

// extDetector remembers whether the broker has the failure-report
// extension: after an answer that says it has none, reports are skipped
// until extensionRecheck has passed. Its lock is taken after a source's own
// lock, never before.
type extDetector struct {
	mu       sync.Mutex
	found    bool      // a report got an extension answer
	absentAt time.Time // when a report found no extension
}

// due reports whether a failure report should be tried at now.
func (d *extDetector) due(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.absentAt.IsZero() || now.Sub(d.absentAt) >= extensionRecheck
}

// report posts one failure report (see postFailure) and updates what is
// known about the extension, logging when that changes. plain names the
// behaviour used without it ("SQS", "AMQP").
func (d *extDetector) report(ctx context.Context, hc httpDoer, url string, body any, log *slog.Logger, now time.Time, plain string) (Outcome, bool, error) {
	out, present, err := postFailure(ctx, hc, url, body)
	if present {
		d.mu.Lock()
		if !d.found {
			log.Info("using the Sluice failure-report extension", "endpoint", url)
		}
		d.found, d.absentAt = true, time.Time{}
		d.mu.Unlock()
		return out, true, err
	}
	if err != nil {
		return Outcome{}, false, err
	}
	d.mu.Lock()
	first := d.absentAt.IsZero() && !d.found
	d.absentAt = now
	d.mu.Unlock()
	lvl := slog.LevelDebug
	if first {
		lvl = slog.LevelInfo
	}
	log.Log(ctx, lvl, "no Sluice failure-report extension here; using plain "+plain+" behaviour (rechecked every 5 minutes)", "endpoint", url)
	return Outcome{}, false, nil
}
