package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/api"
)

// fullIDLen is the length of a message id as Sluice issues it (a UUID).
const fullIDLen = 36

// maxPrefixMatches caps the ids an ambiguity error lists.
const maxPrefixMatches = 5

// resolveID turns a unique prefix of a message id in queue into the full
// id, as git does with commit hashes: the table views print full ids, and
// typing the first few characters is enough. A full-length id is used as
// given. The queue is browsed (without receiving anything) to find the
// matches; none, or more than one, is an error that says so.
func resolveID(ctx context.Context, cl *client, queue, prefix string) (string, error) {
	if len(prefix) >= fullIDLen {
		return prefix, nil
	}
	if prefix == "" {
		return "", fmt.Errorf("empty message id")
	}
	want := strings.ToLower(prefix)
	var matches []string
	cursor := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(api.MaxPageSize)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page api.Page
		if err := cl.call(ctx, "GET", queuePath(queue, "messages"), q, nil, &page); err != nil {
			return "", err
		}
		for _, m := range page.Messages {
			if strings.HasPrefix(strings.ToLower(m.ID), want) {
				matches = append(matches, m.ID)
			}
		}
		if page.Next == "" || len(matches) > maxPrefixMatches {
			break
		}
		cursor = page.Next
	}
	switch {
	case len(matches) == 1:
		return matches[0], nil
	case len(matches) == 0:
		return "", fmt.Errorf("no message in %s has an id starting with %q", queue, prefix)
	default:
		shown := matches[:min(len(matches), maxPrefixMatches)]
		more := ""
		if len(matches) > len(shown) {
			more = ", …"
		}
		return "", fmt.Errorf("message id prefix %q is ambiguous in %s: %s%s (give more characters)", prefix, queue, strings.Join(shown, ", "), more)
	}
}

// resolveIDs replaces each --id that is a prefix by the full id it
// uniquely names in queue (see resolveID), so filters accept the short ids
// the tables print.
func (f *filterFlags) resolveIDs(ctx context.Context, cl *client, queue string) error {
	for i, id := range f.ids {
		full, err := resolveID(ctx, cl, queue, id)
		if err != nil {
			return fmt.Errorf("--id: %w", err)
		}
		f.ids[i] = full
	}
	return nil
}
