package sigv4

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// The per-queue allow-list. A credential with Queues may only address
// those queues. The middleware finds every queue a request names, in every
// place the SQS handler could take one from, and refuses the request
// (AccessDenied) if any is outside the list:
//
//   - the request path /<account>/<name>;
//   - QueueUrl and QueueName;
//   - SourceArn and DestinationArn (message move tasks), and the source
//     queue inside a CancelMessageMoveTask TaskHandle;
//   - the deadLetterTargetArn of a RedrivePolicy attribute (CreateQueue,
//     SetQueueAttributes), which would otherwise let a restricted key
//     route messages into a queue it may not write to.
//
// Member names are matched without regard to case and every occurrence is
// checked, so duplicate or differently-cased members cannot smuggle a
// second queue past the check. A body the middleware cannot parse is
// refused for a restricted key (the handler would refuse it anyway).
// StartMessageMoveTask without a DestinationArn (which moves messages back
// to their source queues, whatever they are) is refused too. ListQueues
// names no queue and is allowed; it lists every queue's URL.

// deniedQueue reports whether p may make request r (body is its body),
// and if not, the resource to name in the refusal.
func deniedQueue(r *http.Request, body []byte, p *Principal) (string, bool) {
	refs, err := referencedQueues(r, body)
	if err != nil {
		return "requested", false
	}
	for _, n := range refs.names {
		if !p.Allows(n) {
			return n, false
		}
	}
	if refs.action == "StartMessageMoveTask" && !refs.destination {
		return "original source queues", false
	}
	return "", true
}

type queueRefs struct {
	action      string
	names       []string
	destination bool // a DestinationArn was given
}

var errUnparsed = errors.New("request not understood")

func referencedQueues(r *http.Request, body []byte) (*queueRefs, error) {
	refs := &queueRefs{}
	if _, name := splitQueuePath(r.URL.Path); name != "" {
		refs.names = append(refs.names, name)
	}
	if isJSONRequest(r) {
		refs.action = strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
		return refs, refs.fromJSON(body)
	}
	form, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errUnparsed
	}
	if r.Method == http.MethodPost && isFormBody(r) {
		b, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errUnparsed
		}
		for k, vs := range b {
			form[k] = append(form[k], vs...)
		}
	}
	return refs, refs.fromForm(form)
}

func (q *queueRefs) fromForm(form url.Values) error {
	q.action = first(form["Action"])
	// Attribute.N.Name=RedrivePolicy pairs with Attribute.N.Value.
	policies := map[string]bool{} // prefixes "Attribute.N." naming a RedrivePolicy
	for k, vs := range form {
		switch {
		case strings.EqualFold(k, "QueueUrl"):
			for _, v := range vs {
				q.addURL(v)
			}
		case strings.EqualFold(k, "QueueName"):
			q.names = append(q.names, vs...)
		case strings.EqualFold(k, "SourceArn"), strings.EqualFold(k, "DestinationArn"):
			for _, v := range vs {
				q.addARN(v)
			}
			q.destination = q.destination || strings.EqualFold(k, "DestinationArn") && first(vs) != ""
		case strings.EqualFold(k, "TaskHandle"):
			for _, v := range vs {
				if err := q.addTaskHandle(v); err != nil {
					return err
				}
			}
		case len(k) > len(".Name") && strings.EqualFold(k[len(k)-len(".Name"):], ".Name"):
			for _, v := range vs {
				if strings.EqualFold(v, "RedrivePolicy") {
					policies[strings.ToLower(k[:len(k)-len("Name")])] = true
				}
			}
		}
	}
	for k, vs := range form {
		if len(k) > len(".Value") && strings.EqualFold(k[len(k)-len(".Value"):], ".Value") &&
			policies[strings.ToLower(k[:len(k)-len("Value")])] {
			for _, v := range vs {
				if err := q.addRedrivePolicy(v); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// fromJSON walks the top-level members of an AWS JSON request.
func (q *queueRefs) fromJSON(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	return walkObject(dec, func(k string) error {
		switch {
		case strings.EqualFold(k, "QueueUrl"):
			return q.withString(dec, q.addURL)
		case strings.EqualFold(k, "QueueName"):
			return q.withString(dec, func(s string) { q.names = append(q.names, s) })
		case strings.EqualFold(k, "SourceArn"):
			return q.withString(dec, q.addARN)
		case strings.EqualFold(k, "DestinationArn"):
			return q.withString(dec, func(s string) {
				q.addARN(s)
				q.destination = q.destination || s != ""
			})
		case strings.EqualFold(k, "TaskHandle"):
			var s *string
			if err := dec.Decode(&s); err != nil {
				return err
			}
			if s == nil {
				return nil
			}
			return q.addTaskHandle(*s)
		case strings.EqualFold(k, "Attributes"):
			return walkObject(dec, func(name string) error {
				if !strings.EqualFold(name, "RedrivePolicy") {
					return skipValue(dec)
				}
				var s *string
				if err := dec.Decode(&s); err != nil {
					return err
				}
				if s == nil {
					return nil
				}
				return q.addRedrivePolicy(*s)
			})
		}
		return skipValue(dec)
	})
}

// withString decodes a string (or null) member and hands it to add.
func (q *queueRefs) withString(dec *json.Decoder, add func(string)) error {
	var s *string
	if err := dec.Decode(&s); err != nil {
		return err
	}
	if s != nil {
		add(*s)
	}
	return nil
}

// walkObject reads one JSON object, calling member for each key with the
// decoder positioned at its value; member must consume the value. A null
// counts as an empty object.
func walkObject(dec *json.Decoder, member func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errUnparsed
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errUnparsed
		}
		if err := member(key); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing brace
	return err
}

func skipValue(dec *json.Decoder) error {
	var raw json.RawMessage
	return dec.Decode(&raw)
}

// addRedrivePolicy adds the dead-letter target of a RedrivePolicy (a JSON
// document in a string). An empty policy removes the redrive and names no
// queue.
func (q *queueRefs) addRedrivePolicy(doc string) error {
	if strings.TrimSpace(doc) == "" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(doc))
	return walkObject(dec, func(k string) error {
		if !strings.EqualFold(k, "deadLetterTargetArn") {
			return skipValue(dec)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return err
		}
		s, ok := v.(string)
		if !ok {
			return errUnparsed
		}
		q.addARN(s)
		return nil
	})
}

// addTaskHandle adds the source queue a move task handle names: the
// handle is base64 of {"taskId":…,"sourceArn":…}.
func (q *queueRefs) addTaskHandle(h string) error {
	raw, err := base64.StdEncoding.DecodeString(h)
	if err != nil {
		return errUnparsed
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	found := false
	err = walkObject(dec, func(k string) error {
		if !strings.EqualFold(k, "sourceArn") {
			return skipValue(dec)
		}
		var s string
		if err := dec.Decode(&s); err != nil {
			return err
		}
		q.addARN(s)
		found = true
		return nil
	})
	if err != nil || !found {
		return errUnparsed
	}
	return nil
}

// addURL adds the queue of a queue URL: its last path segment, as the SQS
// handler resolves it (scheme and host ignored).
func (q *queueRefs) addURL(u string) {
	if u == "" {
		return
	}
	p := u
	if i := strings.Index(p, "://"); i >= 0 {
		p = p[i+3:]
		if j := strings.IndexByte(p, '/'); j >= 0 {
			p = p[j:]
		} else {
			p = ""
		}
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	q.names = append(q.names, p[strings.LastIndexByte(p, '/')+1:])
}

// addARN adds the queue of arn:aws:sqs:<region>:<account>:<name>.
func (q *queueRefs) addARN(arn string) {
	if arn == "" {
		return
	}
	q.names = append(q.names, arn[strings.LastIndexByte(arn, ':')+1:])
}

// splitQueuePath recognises a queue path "/<account>/<name>", as the SQS
// handler does.
func splitQueuePath(p string) (account, name string) {
	p = strings.Trim(p, "/")
	account, name, ok := strings.Cut(p, "/")
	if !ok || account == "" || name == "" || strings.Contains(name, "/") {
		return "", ""
	}
	return account, name
}

// isFormBody mirrors the SQS handler: a POST body is a form when its
// content type says so or is missing.
func isFormBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return true
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/x-www-form-urlencoded"
}
