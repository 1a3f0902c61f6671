package sqs

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// decodeJSON decodes an AWS JSON 1.0 request body into in. An empty body is
// "{}". A body that is not UTF-8, not JSON, or has a member of the wrong
// type fails with SerializationException (HTTP 400, __type
// com.amazon.coral.service#SerializationException), which SDKs surface as
// an API error with that code.
func decodeJSON(body []byte, in any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if fastDecodeJSON(body, in) {
		return nil
	}
	return decodeJSONStd(body, in)
}

// decodeJSONStd is decodeJSON with encoding/json alone: the only decoder
// before fastDecodeJSON, and still the one that produces every error.
func decodeJSONStd(body []byte, in any) *apiError {
	if !utf8.Valid(body) {
		return newErr(kindSerialization, "The request body is not valid UTF-8.")
	}
	if err := json.Unmarshal(body, in); err != nil {
		var msg string
		switch e := err.(type) {
		case *json.UnmarshalTypeError:
			msg = "Unexpected value type for member " + strconv.Quote(e.Field) + "."
		case *json.SyntaxError:
			msg = "The request body is not valid JSON."
		default:
			msg = "The request body could not be decoded."
		}
		return errText(kindSerialization, msg)
	}
	return nil
}

// marshalJSON encodes v without HTML escaping (bodies come back byte for
// byte as SQS returns them).
func marshalJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Our response shapes are plain strings, maps and slices; this
		// cannot fail. Keep the response well-formed regardless.
		return []byte("{}")
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// writeOutput renders a successful result in the request's protocol.
func (c *call) writeOutput(w http.ResponseWriter, out output) {
	switch {
	case c.proto == protoJSON:
		if out == nil {
			c.writeBody(w, http.StatusOK, "application/x-amz-json-1.0", emptyJSON)
			return
		}
		if a, ok := out.(jsonAppender); ok {
			buf := c.h.getBuf()
			*buf = a.appendJSON((*buf)[:0])
			c.writeBody(w, http.StatusOK, "application/x-amz-json-1.0", *buf)
			c.h.putBuf(buf)
			return
		}
		c.writeBody(w, http.StatusOK, "application/x-amz-json-1.0", marshalJSON(out))
	case c.jsonOut:
		// A Query request asking for JSON gets the XML document's structure
		// with AWS's Query-JSON result shape inside (queryJSON), which for
		// most actions is the JSON protocol's.
		resp := map[string]any{"ResponseMetadata": map[string]string{"RequestId": c.reqID}}
		if out != nil {
			resp[c.action+"Result"] = queryJSON(out)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(marshalJSON(map[string]any{c.action + "Response": resp}))
	default:
		var x xmlWriter
		x.b.WriteString(`<?xml version="1.0"?>`)
		x.b.WriteString("<" + c.action + `Response xmlns="` + xmlNamespace + `">`)
		if out != nil {
			// An empty result is written <XResult/>, as SQS does.
			var inner xmlWriter
			out.xml(&inner)
			if inner.b.Len() == 0 {
				x.b.WriteString("<" + c.action + "Result/>")
			} else {
				x.open(c.action + "Result")
				x.b.Write(inner.b.Bytes())
				x.close(c.action + "Result")
			}
		}
		x.open("ResponseMetadata")
		x.elem("RequestId", c.reqID)
		x.close("ResponseMetadata")
		x.close(c.action + "Response")
		c.writeBody(w, http.StatusOK, "text/xml", x.b.Bytes())
	}
}

var emptyJSON = []byte("{}")

// queryJSON is the result member of a Query request answered in JSON
// (Accept: application/json). AWS renders it from the Query model, whose
// lists have lower-case names: a receive answers
// {"ReceiveMessageResult":{"messages":[{"Body":…}]}} (AWS-recorded) and
// ListQueues "queueUrls"; queue attributes are a list of Name/Value
// pairs, as in the XML. Other results use the JSON protocol's shapes.
func queryJSON(out output) any {
	switch o := out.(type) {
	case *receiveMessageOutput:
		msgs := o.Messages
		if msgs == nil {
			msgs = []messageOut{}
		}
		return map[string]any{"messages": msgs}
	case *listQueuesOutput:
		r := map[string]any{"queueUrls": append([]string{}, o.QueueUrls...)}
		if o.NextToken != "" {
			r["NextToken"] = o.NextToken
		}
		return r
	case *attributesOutput:
		type nameValue struct {
			Name  string `json:"Name"`
			Value string `json:"Value"`
		}
		attrs := make([]nameValue, 0, len(o.Attributes))
		for _, k := range sortedKeys(o.Attributes) {
			attrs = append(attrs, nameValue{k, o.Attributes[k]})
		}
		return map[string]any{"Attributes": attrs}
	}
	return out
}

// writeBody writes a complete response with its Content-Length, so that
// large responses are not chunked and the connection stays reusable.
func (c *call) writeBody(w http.ResponseWriter, status int, contentType string, b []byte) {
	h := w.Header()
	c.hdr[1], c.hdr[2] = contentType, strconv.Itoa(len(b))
	h["Content-Type"], h["Content-Length"] = c.hdr[1:2:2], c.hdr[2:3:3]
	w.WriteHeader(status)
	w.Write(b)
}

// maxPooledBuf: larger response buffers are left to the GC rather than kept.
const maxPooledBuf = 1 << 20

func (h *Handler) getBuf() *[]byte {
	if b, ok := h.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 16<<10)
	return &b
}

func (h *Handler) putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		h.bufs.Put(b)
	}
}

// writeError renders err in the request's protocol: JSON with __type and
// message plus the x-amzn-query-error header, or a Query ErrorResponse.
func (c *call) writeError(w http.ResponseWriter, err *apiError) {
	k := err.kind
	switch {
	case err.msg == msgShuttingDown:
		// Every parked long poll ends this way at shutdown.
		c.h.log.Debug("sqs: request ended by shutdown", "action", c.action, "request_id", c.reqID)
	case k == kindServiceUnavailable:
		// Back-pressure (disk nearly full): the SDKs retry; the cause is
		// logged once where it is detected.
		c.h.log.Warn("sqs: request refused", "action", c.action, "code", k.code, "request_id", c.reqID, "err", err.msg)
	case k.status >= 500:
		c.h.log.Error("sqs: request failed", "action", c.action, "code", k.code, "request_id", c.reqID, "err", err.msg)
	default:
		c.h.log.Debug("sqs: request rejected", "action", c.action, "code", k.code, "request_id", c.reqID, "err", err.msg)
	}
	w.Header().Set("x-amzn-query-error", k.code+";"+k.fault())
	switch {
	case k == kindUnknownOperation && c.proto == protoQuery:
		// A Query request without Action on a queue path: AWS answers
		// 404 with a bare UnknownOperationException document, in XML
		// even when JSON is accepted (AWS-recorded).
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(k.status)
		w.Write([]byte(`<?xml version="1.0"?><UnknownOperationException/>`))
	case c.proto == protoJSON:
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(k.status)
		w.Write(marshalJSON(map[string]string{"__type": k.jsonType(), "message": err.msg}))
	case c.jsonOut:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(k.status)
		w.Write(marshalJSON(map[string]any{"ErrorResponse": map[string]any{
			"Error":     map[string]string{"Type": k.fault(), "Code": k.code, "Message": err.queryText()},
			"RequestId": c.reqID,
		}}))
	default:
		var x xmlWriter
		x.b.WriteString(`<?xml version="1.0"?>`)
		x.b.WriteString(`<ErrorResponse xmlns="` + xmlNamespace + `">`)
		x.open("Error")
		x.elem("Type", k.fault())
		x.elem("Code", k.code)
		x.elem("Message", err.queryText())
		x.b.WriteString("<Detail/>")
		x.close("Error")
		x.elem("RequestId", c.reqID)
		x.close("ErrorResponse")
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(k.status)
		w.Write(x.b.Bytes())
	}
}

func (e *apiError) queryText() string {
	if e.queryMsg != "" {
		return e.queryMsg
	}
	return e.msg
}
