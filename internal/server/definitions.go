package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/amqp"
	"github.com/sluicemq/sluice/internal/sqs"
)

// Definitions are the broker's declared objects as data, in the spirit of
// RabbitMQ's definitions file: SQS queues with their attributes (dead-letter
// queue, redrive and retry policies included) and the durable AMQP
// topology. The config file declares them ([[queues]], [[exchanges]],
// [[amqp_queues]], [[bindings]]) and they are applied at every start;
// GET /sluice/v1/definitions exports them and POST imports a document
// (`sluice definitions export` / `import`). Applying is idempotent: what
// exists with the same settings is left alone. Messages are not part of
// definitions (use `sluice dlq export` for those).
type Definitions struct {
	// SluiceVersion is the version that exported the document
	// (informational; ignored on import).
	SluiceVersion string                    `json:"sluice_version,omitempty"`
	Queues        []QueueDeclaration        `json:"queues"`
	Exchanges     []amqp.ExchangeDefinition `json:"exchanges"`
	AMQPQueues    []amqp.QueueDefinition    `json:"amqp_queues"`
	Bindings      []amqp.BindingDefinition  `json:"bindings"`
}

// QueueDeclaration is one SQS queue: [[queues]] in the config file, an
// entry of "queues" in a definitions document.
type QueueDeclaration struct {
	Name string `json:"name" toml:"name"`
	// Attributes are CreateQueue's (VisibilityTimeout, RedrivePolicy,
	// SluiceRetryPolicy, FifoQueue, ...), values as strings.
	Attributes map[string]string `json:"attributes,omitempty" toml:"attributes"`
	Tags       map[string]string `json:"tags,omitempty" toml:"tags"`
	// DeadLetterQueue and MaxReceiveCount are a shorthand for a
	// RedrivePolicy naming the queue by name instead of by ARN.
	DeadLetterQueue string `json:"dead_letter_queue,omitempty" toml:"dead_letter_queue"`
	MaxReceiveCount int    `json:"max_receive_count,omitempty" toml:"max_receive_count"`
	// RetryPolicy is a shorthand for SluiceRetryPolicy, as a table:
	// {strategy = "full-jitter", baseSeconds = 1, capSeconds = 30}.
	RetryPolicy map[string]any `json:"retry_policy,omitempty" toml:"retry_policy"`
}

// attributes returns the declaration's attributes with the shorthands
// expanded; a shorthand and the attribute it stands for cannot both be set.
func (q QueueDeclaration) attributes(h *sqs.Handler) (map[string]string, error) {
	attrs := maps.Clone(q.Attributes)
	if attrs == nil {
		attrs = map[string]string{}
	}
	if q.DeadLetterQueue != "" || q.MaxReceiveCount != 0 {
		if _, ok := attrs["RedrivePolicy"]; ok {
			return nil, errors.New("dead_letter_queue/max_receive_count and attributes.RedrivePolicy both set; use one")
		}
		if q.DeadLetterQueue == "" || q.MaxReceiveCount == 0 {
			return nil, errors.New("dead_letter_queue and max_receive_count go together")
		}
		doc, _ := json.Marshal(map[string]string{"deadLetterTargetArn": h.QueueARN(q.DeadLetterQueue), "maxReceiveCount": strconv.Itoa(q.MaxReceiveCount)})
		attrs["RedrivePolicy"] = string(doc)
	}
	if q.RetryPolicy != nil {
		if _, ok := attrs["SluiceRetryPolicy"]; ok {
			return nil, errors.New("retry_policy and attributes.SluiceRetryPolicy both set; use one")
		}
		doc, err := json.Marshal(q.RetryPolicy)
		if err != nil {
			return nil, fmt.Errorf("retry_policy: %w", err)
		}
		attrs["SluiceRetryPolicy"] = string(doc)
	}
	return attrs, nil
}

// Ties returns the queues the declared queue names as the ones it lives
// with in a cluster with shards: its dead-letter queue (dead_letter_queue,
// or the target of its RedrivePolicy) and the queue its sluice:place-with
// tag names, in that order, those that are set.
func (q QueueDeclaration) Ties() []string {
	var out []string
	if q.DeadLetterQueue != "" {
		out = append(out, q.DeadLetterQueue)
	} else if rp := q.Attributes["RedrivePolicy"]; rp != "" {
		var p struct {
			Target string `json:"deadLetterTargetArn"`
		}
		if json.Unmarshal([]byte(rp), &p) == nil && p.Target != "" {
			out = append(out, p.Target[strings.LastIndexByte(p.Target, ':')+1:])
		}
	}
	if w := q.Tags[sqs.PlaceWithTag]; w != "" {
		out = append(out, w)
	}
	return out
}

// applyDefinitions declares d: SQS queues first without their redrive
// policies, then the redrive policies (so a queue may name a dead-letter
// queue declared after it), then the AMQP exchanges, queues and bindings.
// It stops at the first error, naming the object.
func (s *Server) applyDefinitions(d Definitions) error {
	d = s.withoutQueuesElsewhere(d)
	h := s.declarer()
	redrive := map[string]string{}
	for _, q := range d.Queues {
		attrs, err := q.attributes(h)
		if err != nil {
			return fmt.Errorf("queues %q: %w", q.Name, err)
		}
		if rp, ok := attrs["RedrivePolicy"]; ok {
			redrive[q.Name] = rp
			delete(attrs, "RedrivePolicy")
		}
		if _, err := h.DeclareQueue(q.Name, attrs, q.Tags); err != nil {
			return fmt.Errorf("queues %q: %w", q.Name, err)
		}
	}
	for _, q := range d.Queues {
		if rp, ok := redrive[q.Name]; ok {
			if _, err := h.DeclareQueue(q.Name, map[string]string{"RedrivePolicy": rp}, nil); err != nil {
				return fmt.Errorf("queues %q: %w", q.Name, err)
			}
		}
	}
	return s.amqp.Declare(amqp.Definitions{Exchanges: d.Exchanges, Queues: d.AMQPQueues, Bindings: d.Bindings})
}

// exportDefinitions returns every SQS queue (those AMQP did not create)
// with its settable attributes and tags, and the durable AMQP topology.
// A queue declared over AMQP that a cluster placed on this server's shard
// (amqp.PlacedDefinition) is listed among the AMQP queues, as it was
// declared.
func (s *Server) exportDefinitions() Definitions {
	h := s.declarer()
	ad := s.amqp.Definitions()
	d := Definitions{SluiceVersion: s.opts.Build.Version, Queues: []QueueDeclaration{},
		Exchanges: ad.Exchanges, AMQPQueues: ad.Queues, Bindings: ad.Bindings}
	names := s.eng.ListQueues("")
	sort.Strings(names)
	for _, name := range names {
		if s.amqp.IsAMQPQueue(name) || strings.HasPrefix(name, "amq.") {
			continue
		}
		if cfg, err := s.eng.Config(name); err == nil {
			if qd, ok := amqp.PlacedDefinition(name, *cfg); ok {
				d.AMQPQueues = append(d.AMQPQueues, qd)
				continue
			}
		}
		attrs, tags, err := h.QueueDefinition(name)
		if err != nil {
			continue // deleted since ListQueues
		}
		d.Queues = append(d.Queues, QueueDeclaration{Name: name, Attributes: attrs, Tags: tags})
	}
	return d
}

// declarer is an SQS handler used in-process to declare queues with the
// SQS API's validation (never mounted on a listener).
func (s *Server) declarer() *sqs.Handler {
	return sqs.New(s.eng, sqs.Options{AccountID: s.opts.AccountID, Region: s.opts.Region, Logger: s.log.With("component", "definitions")})
}

// maxDefinitionsBody caps an imported document.
const maxDefinitionsBody = 16 << 20

// definitionsHandler serves GET (export) and POST (import, JSON only) on
// /sluice/v1/definitions. Mount it behind operator authentication.
// serveLocalDefinitions answers the export of this server's own engine
// (ShardDefinitionsPath), without the other shards'.
func (s *Server) serveLocalDefinitions(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.exportDefinitions()) // a client gone cannot be told
}

// ErrDefinitionsRefused marks, in Options.DeclareElsewhere's error, a
// declaration another shard's leader refused (the import answers 400, as
// for one refused here).
var ErrDefinitionsRefused = errors.New("the declarations were refused")

// declareLocalQueues declares, in this server's engine, the SQS queues of
// a definitions document another shard's leader sent (Options.
// DeclareElsewhere); the document's AMQP objects are not for it. It
// answers 200, or 400 with the refusal.
func (s *Server) declareLocalQueues(w http.ResponseWriter, r *http.Request) {
	var d Definitions
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxDefinitionsBody)).Decode(&d); err != nil {
		writeAdminError(w, http.StatusBadRequest, "InvalidDefinitions", "not a definitions document: "+err.Error())
		return
	}
	if err := s.applyDefinitions(Definitions{Queues: d.Queues}); err != nil {
		writeAdminError(w, http.StatusBadRequest, "InvalidDefinitions", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "{}\n") // a caller gone cannot be told
}

func (s *Server) definitionsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			d := s.exportDefinitions()
			if other := s.opts.OtherShards; other != nil {
				// A cluster's other shards hold queues only (the AMQP
				// topology is shard 0's): SQS queues, and AMQP queues
				// placed there; an export without them would be a
				// backup that looks whole and is not.
				more, err := readAll(r.Context(), other, ShardDefinitionsPath, func(d Definitions) []Definitions { return []Definitions{d} })
				if err != nil {
					w.Header().Set("Retry-After", "1")
					writeAdminError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the queues of another shard could not be exported ("+err.Error()+"); retry")
					return
				}
				for _, m := range more {
					d.Queues = append(d.Queues, m.Queues...)
					d.AMQPQueues = append(d.AMQPQueues, m.AMQPQueues...)
				}
				slices.SortFunc(d.Queues, func(a, b QueueDeclaration) int { return strings.Compare(a.Name, b.Name) })
				slices.SortFunc(d.AMQPQueues, func(a, b amqp.QueueDefinition) int {
					return cmp.Or(strings.Compare(a.Vhost, b.Vhost), strings.Compare(a.Name, b.Name))
				})
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(d) // the status is sent: a client gone by now cannot be told
		case http.MethodPost:
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
				writeAdminError(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", "send the definitions as Content-Type: application/json")
				return
			}
			data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDefinitionsBody))
			if err != nil {
				writeAdminError(w, http.StatusRequestEntityTooLarge, "TooLarge", fmt.Sprintf("definitions larger than %d bytes", maxDefinitionsBody))
				return
			}
			var d Definitions
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&d); err != nil {
				writeAdminError(w, http.StatusBadRequest, "InvalidDefinitions", "not a definitions document: "+err.Error())
				return
			}
			local := d
			if elsewhere := s.opts.DeclareElsewhere; elsewhere != nil {
				// A cluster's other shards declare the queues placed
				// there first: a queue and its dead-letter queue are
				// always placed together, so each part stands alone.
				qs, err := elsewhere(r.Context(), d.Queues)
				switch {
				case errors.Is(err, ErrDefinitionsRefused):
					writeAdminError(w, http.StatusBadRequest, "InvalidDefinitions", err.Error())
					return
				case err != nil:
					w.Header().Set("Retry-After", "1")
					writeAdminError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the queues of another shard could not be declared ("+err.Error()+"); retry")
					return
				}
				local.Queues = qs
			}
			if err := s.applyDefinitions(local); err != nil {
				writeAdminError(w, http.StatusBadRequest, "InvalidDefinitions", err.Error())
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]int{"queues": len(d.Queues), "exchanges": len(d.Exchanges),
				"amqp_queues": len(d.AMQPQueues), "bindings": len(d.Bindings)})
		default:
			w.Header().Set("Allow", "GET, POST")
			writeAdminError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "use GET to export or POST to import")
		}
	})
}

func writeAdminError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}})
}
