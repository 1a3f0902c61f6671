package admin

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

// Query parameters of browse and export. Every other parameter is refused,
// so that a misspelt filter (errorclass=…) is an error, not "everything".
const (
	paramCursor      = "cursor"
	paramLimit       = "limit"
	paramReason      = "reason"
	paramErrorClass  = "errorClass"
	paramSourceQueue = "sourceQueue"
	paramSentAfter   = "sentAfter"
	paramSentBefore  = "sentBefore"
	paramAttribute   = "attribute"
	paramID          = "id"
)

// Browse page sizes (the public ones are api.DefaultPageSize and
// api.MaxPageSize).
const (
	exportPageSize = 500
	maxFilterIDs   = 1000
)

// browseQuery is a decoded browse or export query.
type browseQuery struct {
	filter engine.Filter
	cursor uint64
	limit  int
}

// parseBrowseQuery decodes the query of GET …/messages and …/export. With
// paging false (export), cursor and limit are refused.
func parseBrowseQuery(q url.Values, paging bool) (browseQuery, error) {
	out := browseQuery{limit: api.DefaultPageSize}
	for k, vs := range q {
		switch k {
		case paramReason, paramErrorClass, paramSourceQueue, paramSentAfter, paramSentBefore, paramAttribute:
			if len(vs) > 1 {
				return out, badRequest("query parameter %q may be given once", k)
			}
		case paramID:
			if len(vs) > maxFilterIDs {
				return out, badRequest("at most %d id parameters", maxFilterIDs)
			}
		case paramCursor, paramLimit:
			if !paging {
				return out, badRequest("query parameter %q is not accepted here", k)
			}
			if len(vs) > 1 {
				return out, badRequest("query parameter %q may be given once", k)
			}
		default:
			return out, badRequest("unknown query parameter %q", k)
		}
	}
	f := api.Filter{
		Reason:      q.Get(paramReason),
		ErrorClass:  q.Get(paramErrorClass),
		SourceQueue: q.Get(paramSourceQueue),
		IDs:         q[paramID],
	}
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{paramSentAfter, &f.SentAfter}, {paramSentBefore, &f.SentBefore}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return out, badRequest("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z: %q", p.name, s)
		}
		*p.dst = &t
	}
	if a, ok := q[paramAttribute]; ok {
		name, value, _ := strings.Cut(a[0], "=")
		f.Attribute = &api.AttributeFilter{Name: name, Value: value}
	}
	ef, err := engineFilter(&f)
	if err != nil {
		return out, err
	}
	out.filter = ef
	if s := q.Get(paramCursor); s != "" {
		c, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return out, badRequest("invalid cursor %q: pass back the next value of a previous page", s)
		}
		out.cursor = c
	}
	if s := q.Get(paramLimit); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > api.MaxPageSize {
			return out, badRequest("limit must be between 1 and %d", api.MaxPageSize)
		}
		out.limit = n
	}
	return out, nil
}

// engineFilter validates a wire filter and converts it. Ids must be in
// the UUID form Sluice issues; an id that cannot exist is a mistake, not a
// filter that matches nothing.
func engineFilter(f *api.Filter) (engine.Filter, error) {
	out := engine.Filter{
		Reason:      f.Reason,
		ErrorClass:  f.ErrorClass,
		SourceQueue: f.SourceQueue,
		SentAfter:   timeVal(f.SentAfter),
		SentBefore:  timeVal(f.SentBefore),
	}
	if rs := api.DeadLetterReasons(); f.Reason != "" && !slices.Contains(rs, f.Reason) {
		return out, badRequest("unknown reason %q: one of %s", f.Reason, strings.Join(rs, ", "))
	}
	if !out.SentAfter.IsZero() && !out.SentBefore.IsZero() && !out.SentAfter.Before(out.SentBefore) {
		return out, badRequest("sentAfter must be before sentBefore")
	}
	if a := f.Attribute; a != nil {
		if a.Name == "" {
			return out, badRequest("an attribute filter needs a name (attribute=name or attribute=name=value)")
		}
		out.AttributeName, out.AttributeValue = a.Name, a.Value
	}
	if len(f.IDs) > maxFilterIDs {
		return out, badRequest("at most %d ids", maxFilterIDs)
	}
	for _, id := range f.IDs {
		if !validID(id) {
			return out, badRequest("invalid message id %q: expected a UUID", id)
		}
	}
	if len(f.IDs) > 0 {
		out.MessageIDs = append([]string(nil), f.IDs...)
	}
	return out, nil
}

// validID reports whether s is a message id in the form
// xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lower-case hex, as Sluice formats
// them; filters compare ids as strings).
func validID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}
