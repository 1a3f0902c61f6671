package admin

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/api"
	"github.com/sluicemq/sluice/internal/engine"
)

var errMessageNotFound = &apiError{http.StatusNotFound, "MessageNotFound", "no message with that id in the queue"}

// browse serves GET /sluice/v1/queues/{name}/messages: one page of
// messages in queue order, without changing them (no receive count, no
// visibility change).
func (h *Handler) browse(w http.ResponseWriter, r *http.Request) error {
	bq, err := parseBrowseQuery(r.URL.Query(), true)
	if err != nil {
		return err
	}
	page, err := h.eng.Browse(r.PathValue("name"), bq.filter, bq.cursor, bq.limit)
	if err != nil {
		return err
	}
	out := api.Page{Messages: make([]api.Message, 0, len(page.Messages))}
	for i := range page.Messages {
		out.Messages = append(out.Messages, messageJSON(&page.Messages[i]))
	}
	if page.Next != 0 {
		out.Next = strconv.FormatUint(page.Next, 10)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// findMessage returns the message with the id from the path.
func (h *Handler) findMessage(r *http.Request) (engine.View, error) {
	id := r.PathValue("id")
	if !validID(id) {
		return engine.View{}, badRequest("invalid message id %q: expected a UUID", id)
	}
	page, err := h.eng.Browse(r.PathValue("name"), engine.Filter{MessageIDs: []string{id}}, 0, 1)
	if err != nil {
		return engine.View{}, err
	}
	if len(page.Messages) == 0 {
		return engine.View{}, errMessageNotFound
	}
	return page.Messages[0], nil
}

// getMessage serves GET /sluice/v1/queues/{name}/messages/{id}.
func (h *Handler) getMessage(w http.ResponseWriter, r *http.Request) error {
	v, err := h.findMessage(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, messageJSON(&v))
	return nil
}

// deleteMessage serves DELETE /sluice/v1/queues/{name}/messages/{id}: the
// message is deleted in whatever state it is; 404 when it is not there.
func (h *Handler) deleteMessage(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !validID(id) {
		return badRequest("invalid message id %q: expected a UUID", id)
	}
	n, err := h.eng.DeleteMatching(r.PathValue("name"), engine.Filter{MessageIDs: []string{id}})
	if err != nil {
		return err
	}
	if n == 0 {
		return errMessageNotFound
	}
	writeJSON(w, http.StatusOK, api.DeleteResult{Deleted: n})
	return nil
}

// deleteMessages serves POST /sluice/v1/queues/{name}/messages:delete with
// a DeleteRequest. An empty filter deletes nothing unless all is true.
func (h *Handler) deleteMessages(w http.ResponseWriter, r *http.Request) error {
	var req api.DeleteRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	switch {
	case req.Filter.IsZero() && !req.All:
		return &apiError{http.StatusBadRequest, "EmptyFilter", `refusing to delete every message: give a filter, or "all": true to empty the queue`}
	case !req.Filter.IsZero() && req.All:
		return badRequest(`"all": true deletes every message; it cannot be combined with a filter`)
	}
	f, err := engineFilter(&req.Filter)
	if err != nil {
		return err
	}
	n, err := h.eng.DeleteMatching(r.PathValue("name"), f)
	if err != nil {
		return err
	}
	h.log.Info("admin delete", "queue", r.PathValue("name"), "deleted", n, "all", req.All)
	writeJSON(w, http.StatusOK, api.DeleteResult{Deleted: n})
	return nil
}

// export serves GET /sluice/v1/queues/{name}/export: every matching
// message as JSONL (one Message per line), streamed page by page. Errors
// found before the first byte are JSON errors; a failure mid-stream ends
// the stream early, so consumers should compare the line count with the
// queue's depth when it matters.
func (h *Handler) export(w http.ResponseWriter, r *http.Request) error {
	bq, err := parseBrowseQuery(r.URL.Query(), false)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	page, err := h.eng.Browse(name, bq.filter, 0, exportPageSize)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", attachment(name+".jsonl"))
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	for {
		for i := range page.Messages {
			if err := enc.Encode(messageJSON(&page.Messages[i])); err != nil {
				h.log.Info("export ended early", "queue", name, "lines", n, "err", err)
				return nil
			}
			n++
		}
		if err := bw.Flush(); err != nil {
			h.log.Info("export ended early", "queue", name, "lines", n, "err", err)
			return nil
		}
		// Best effort: a writer that cannot flush still delivers at the
		// end, and a client that went away fails the next page's write.
		_ = rc.Flush()
		if page.Next == 0 || r.Context().Err() != nil {
			return nil
		}
		if page, err = h.eng.Browse(name, bq.filter, page.Next, exportPageSize); err != nil {
			h.log.Error("export ended early", "queue", name, "lines", n, "err", err)
			return nil
		}
	}
}

// importMessages serves POST /sluice/v1/queues/{name}/import: a JSONL body
// of Messages (as export writes them). Every line is validated before any
// message is stored; a bad line answers 400 naming its line number and
// nothing is imported. Blank lines are skipped.
func (h *Handler) importMessages(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	cfg, err := h.eng.Config(name)
	if err != nil {
		return err
	}
	br := bufio.NewReaderSize(http.MaxBytesReader(w, r.Body, MaxImportBody), 64<<10)
	var views []engine.View
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if len(bytes.TrimSpace(b)) > 0 {
			v, verr := decodeImportLine(b, cfg, h.checkEnv)
			if verr != nil {
				return &apiError{http.StatusBadRequest, "InvalidImportLine", "line " + strconv.Itoa(line) + ": " + verr.Error() + "; nothing was imported"}
			}
			views = append(views, v)
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	n, err := h.eng.Import(name, views)
	if err != nil {
		return err
	}
	h.log.Info("admin import", "queue", name, "imported", n)
	writeJSON(w, http.StatusOK, api.ImportResult{Imported: n})
	return nil
}

// decodeImportLine decodes and validates one JSONL line for a queue with
// settings cfg. It checks everything the engine would refuse, so that an
// import either stores every line or none, and an envelope with
// checkEnv (nil: an envelope is refused), so that no consumer is given
// properties it cannot decode.
func decodeImportLine(line []byte, cfg *engine.QueueConfig, checkEnv func([]byte) error) (engine.View, error) {
	var m api.Message
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return engine.View{}, errors.New("invalid JSON: " + err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return engine.View{}, errors.New("invalid JSON: more than one value on the line")
	}
	id := strings.ToLower(m.ID)
	if !validID(id) {
		return engine.View{}, errors.New("id must be a message id in UUID form")
	}
	var body []byte
	switch m.BodyEncoding {
	case "":
		body = []byte(m.Body)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(m.Body)
		if err != nil {
			return engine.View{}, errors.New("body is not valid base64")
		}
		body = b
	default:
		return engine.View{}, errors.New(`bodyEncoding must be absent or "base64"`)
	}
	if len(body) == 0 {
		return engine.View{}, errors.New("body must not be empty")
	}
	if m.ReceiveCount < 0 || m.ReceiveCount > math.MaxInt32 {
		return engine.View{}, errors.New("receiveCount out of range")
	}
	if cfg.FIFO && m.GroupID == "" {
		return engine.View{}, errors.New("groupId is required on a FIFO queue")
	}
	if m.Priority < 0 || m.Priority > engine.MaxPriority {
		return engine.View{}, errors.New("priority must be 0 to " + strconv.Itoa(engine.MaxPriority))
	}
	if len(m.Envelope) > 0 {
		if checkEnv == nil {
			return engine.View{}, errors.New("envelope: this server has no protocol to check it")
		}
		if err := checkEnv(m.Envelope); err != nil {
			return engine.View{}, errors.New("envelope: " + err.Error())
		}
	}
	v := engine.View{Delivery: engine.Delivery{
		MessageID:        id,
		Body:             body,
		TraceHeader:      m.TraceHeader,
		SenderID:         m.SenderID,
		SentAt:           timeVal(m.SentAt),
		FirstReceiveAt:   timeVal(m.FirstReceiveAt),
		ReceiveCount:     m.ReceiveCount,
		GroupID:          m.GroupID,
		DedupID:          m.DedupID,
		DeadLetterSource: m.DeadLetterSource,
		Priority:         uint8(m.Priority),
		Envelope:         m.Envelope,
	}}
	for i, a := range m.Attributes {
		base, _, _ := strings.Cut(a.DataType, ".")
		if a.Name == "" {
			return engine.View{}, errors.New("attribute " + strconv.Itoa(i+1) + " has no name")
		}
		if base != "String" && base != "Number" && base != "Binary" {
			return engine.View{}, errors.New("attribute " + strconv.Quote(a.Name) + ": dataType must be String, Number or Binary (optionally with a .suffix)")
		}
		v.Attributes = append(v.Attributes, engine.Attribute{Name: a.Name, DataType: a.DataType, StringValue: a.StringValue, BinaryValue: a.BinaryValue})
	}
	msg := engine.Message{Body: body, Attributes: v.Attributes, Envelope: m.Envelope}
	if size := msg.Size(); size > cfg.MaxMessageSize {
		return engine.View{}, errors.New("message of " + strconv.Itoa(size) + " bytes exceeds the queue's limit of " + strconv.Itoa(cfg.MaxMessageSize))
	}
	if d := m.DeadLetter; d != nil {
		v.DeadLetter = &engine.DeadLetterInfo{
			SourceQueue: d.SourceQueue, Reason: d.Reason, Attempts: d.Attempts,
			FirstReceiveAt: timeVal(d.FirstReceiveAt), LastReceiveAt: timeVal(d.LastReceiveAt),
			DeadLetteredAt: timeVal(d.DeadLetteredAt),
		}
	}
	if f := m.LastFailure; f != nil {
		v.LastFailure = &engine.FailureRecord{
			ErrorClass:      truncate(f.ErrorClass, engine.MaxErrorClass),
			Message:         truncate(f.Message, engine.MaxErrorText),
			Trace:           truncate(f.Trace, engine.MaxTrace),
			ConsumerID:      truncate(f.ConsumerID, engine.MaxConsumerID),
			ConsumerVersion: truncate(f.ConsumerVersion, engine.MaxConsumerID),
			ReportedAt:      timeVal(f.ReportedAt), Attempt: f.Attempt,
		}
	}
	if rd := m.Redrive; rd != nil {
		v.Redrive = &engine.RedriveInfo{OriginalMessageID: rd.OriginalMessageID, Count: rd.Count, TaskID: rd.TaskID, At: timeVal(rd.At)}
	}
	// View repeats the context outside its Delivery; keep both the same.
	v.Delivery.DeadLetter, v.Delivery.LastFailure, v.Delivery.Redrive = v.DeadLetter, v.LastFailure, v.Redrive
	return v, nil
}

// truncate cuts s to at most n bytes on a rune boundary, as the engine
// does for reported failures, so imported context obeys the same caps.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// attachment is a Content-Disposition for a download named filename. The
// name comes from a queue name, which over AMQP may hold quotes,
// semicolons or non-ASCII: mime.FormatMediaType quotes and encodes it
// (RFC 2231 for non-ASCII), so it cannot add parameters or headers.
func attachment(filename string) string {
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": filename}); v != "" {
		return v
	}
	return "attachment" // a name FormatMediaType cannot carry (control characters)
}
