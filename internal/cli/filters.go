package cli

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluicemq/sluice/api"
)

// filterFlags are the message selection flags shared by peek, delete,
// export and redrive.
type filterFlags struct {
	reason, errorClass, source string
	since, until               string
	attribute                  string
	ids                        stringList
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func (c *command) filterFlags() *filterFlags {
	f := &filterFlags{}
	c.fs.StringVar(&f.reason, "reason", "", "only messages dead-lettered for this reason: "+strings.Join(api.DeadLetterReasons(), ", "))
	c.fs.StringVar(&f.errorClass, "error-class", "", "only messages whose last reported error class is this")
	c.fs.StringVar(&f.source, "source", "", "only messages dead-lettered from this queue")
	c.fs.StringVar(&f.since, "since", "", "only messages sent at or after this time (RFC 3339, or a duration ago such as 2h)")
	c.fs.StringVar(&f.until, "until", "", "only messages sent before this time (RFC 3339, or a duration ago)")
	c.fs.StringVar(&f.attribute, "attribute", "", "only messages with this user attribute: name or name=value")
	c.fs.Var(&f.ids, "id", "only this message id (repeatable)")
	return f
}

// when parses an absolute RFC 3339 time or a duration before now.
func when(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration (90m)", s)
}

// filter returns the selection as the API's JSON filter.
func (f *filterFlags) filter(now time.Time) (api.Filter, error) {
	if rs := api.DeadLetterReasons(); f.reason != "" && !slices.Contains(rs, f.reason) {
		return api.Filter{}, fmt.Errorf("unknown --reason %q: one of %s", f.reason, strings.Join(rs, ", "))
	}
	out := api.Filter{Reason: f.reason, ErrorClass: f.errorClass, SourceQueue: f.source, IDs: f.ids}
	for _, p := range []struct {
		flag, val string
		dst       **time.Time
	}{{"since", f.since, &out.SentAfter}, {"until", f.until, &out.SentBefore}} {
		if p.val == "" {
			continue
		}
		t, err := when(p.val, now)
		if err != nil {
			return out, fmt.Errorf("--%s: %w", p.flag, err)
		}
		*p.dst = &t
	}
	if f.attribute != "" {
		name, value, _ := strings.Cut(f.attribute, "=")
		out.Attribute = &api.AttributeFilter{Name: name, Value: value}
	}
	return out, nil
}

// query returns the selection as browse/export query parameters.
func (f *filterFlags) query(now time.Time) (url.Values, error) {
	flt, err := f.filter(now)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("reason", flt.Reason)
	set("errorClass", flt.ErrorClass)
	set("sourceQueue", flt.SourceQueue)
	if flt.SentAfter != nil {
		q.Set("sentAfter", flt.SentAfter.Format(time.RFC3339Nano))
	}
	if flt.SentBefore != nil {
		q.Set("sentBefore", flt.SentBefore.Format(time.RFC3339Nano))
	}
	if a := flt.Attribute; a != nil {
		v := a.Name
		if a.Value != "" {
			v += "=" + a.Value
		}
		q.Set("attribute", v)
	}
	for _, id := range flt.IDs {
		q.Add("id", id)
	}
	return q, nil
}
