package sqs

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// A hand-written decoder for the request shapes of the hot actions
// (SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch),
// ChangeMessageVisibility(Batch)). It does in one pass what encoding/json
// does in three (validity pre-scan, reflection-driven decode, unquoting),
// and its strings are not copies: they point into the request body, which
// the caller never modifies or reuses.
//
// It is a fast path, not a second implementation of the error rules: it
// accepts only what encoding/json decodes without error, to the same
// result, and gives up (returns false) on anything else: a syntax error, a
// member of an unexpected type, a repeated member, invalid base64, invalid
// UTF-8. decodeJSON then decodes the body again with encoding/json, which
// produces the error, or the result, exactly as before. FuzzJSONDecoderDiff
// compares the two decoders on arbitrary input.
//
// encoding/json rules mirrored here: member names match exactly or else
// case-insensitively (Unicode simple folding, as strings.EqualFold);
// unknown members are skipped; null leaves a string or optInt unchanged and
// sets a pointer, slice or map to nil; an empty array is an empty, non-nil
// slice and an object a non-nil map; a map member's value starts from zero
// and a repeated map key keeps the last value; []byte is standard base64;
// escapes \uD800-\uDFFF that do not form a pair become U+FFFD.

// maxSkipDepth bounds the nesting of skipped values (encoding/json's limit
// is 10000; deeper input falls back to it).
const maxSkipDepth = 1000

type jdec struct {
	b    []byte
	i    int
	strs []string // backing store for *string members; never appended past cap
}

// fastDecodeJSON decodes body into in if in is one of the hot request shapes
// and body is a well-formed request that encoding/json decodes without
// error. On false, in is untouched.
func fastDecodeJSON(body []byte, in any) bool {
	d := jdec{b: body}
	if d.peek() == 'n' {
		// A top-level null decodes to nothing.
		return d.lit("null") && d.end()
	}
	switch v := in.(type) {
	case *sendMessageBatchInput:
		var x sendMessageBatchInput
		if !d.sendBatch(&x) || !d.end() {
			return false
		}
		*v = x
	case *sendMessageInput:
		var x sendMessageInput
		if !d.sendEntry(&x.sendEntry, &x.QueueUrl) || !d.end() {
			return false
		}
		*v = x
	case *receiveMessageInput:
		var x receiveMessageInput
		if !d.receive(&x) || !d.end() {
			return false
		}
		*v = x
	case *deleteMessageInput:
		var x changeVisibilityInput
		if !d.handle(&x, false) || !d.end() {
			return false
		}
		*v = deleteMessageInput{QueueUrl: x.QueueUrl, ReceiptHandle: x.ReceiptHandle}
	case *changeVisibilityInput:
		var x changeVisibilityInput
		if !d.handle(&x, true) || !d.end() {
			return false
		}
		*v = x
	case *deleteBatchInput:
		var x batchHandleInput
		if !d.handleBatch(&x) || !d.end() {
			return false
		}
		v.batchHandleInput = x
	case *changeVisibilityBatchInput:
		var x batchHandleInput
		if !d.handleBatch(&x) || !d.end() {
			return false
		}
		v.batchHandleInput = x
	default:
		return false
	}
	return true
}

// ---- Lexical level ----

func (d *jdec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte (0 at the end).
func (d *jdec) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// end reports whether only white space is left.
func (d *jdec) end() bool {
	d.ws()
	return d.i == len(d.b)
}

func (d *jdec) lit(s string) bool {
	if len(d.b)-d.i >= len(s) && string(d.b[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	return false
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainWord reports whether none of the 8 bytes of w needs attention in a
// JSON string: all are 0x20–0x7F and none is '"' or '\\'. (The borrow trick
// is exact for "is there such a byte": a borrow only starts at a byte that
// is itself below the bound.)
func plainWord(w uint64) bool {
	quote := w ^ (lsb * '"')
	bslash := w ^ (lsb * '\\')
	t := (w - lsb*0x20) | w | ((quote - lsb) &^ quote) | ((bslash - lsb) &^ bslash)
	return t&msb == 0
}

// str decodes the string starting at d.i (a '"'). Without escapes the
// result points into the body.
func (d *jdec) str() (string, bool) {
	b := d.b
	start := d.i + 1
	i := start
	for {
		for i+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return "", false
		}
		c := b[i]
		if c == '"' {
			d.i = i + 1
			return bodyString(b[start:i]), true
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return d.strSlow(start, i)
		}
		i++
	}
}

// bodyString is a string sharing s's memory. The request body is never
// written after it is read, so this is safe.
func bodyString(s []byte) string {
	if len(s) == 0 {
		return ""
	}
	return unsafe.String(&s[0], len(s))
}

// strSlow continues str at b[i] with escapes, control characters and
// multi-byte UTF-8.
func (d *jdec) strSlow(start, i int) (string, bool) {
	b := d.b
	var out []byte // nil until the first escape
	seg := start
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			d.i = i + 1
			if out == nil {
				return bodyString(b[start:i]), true
			}
			out = append(out, b[seg:i]...)
			return bodyString(out), true
		case c == '\\':
			if out == nil {
				// Unescaping never lengthens a string: size the copy by
				// the escaped form.
				out = make([]byte, 0, quotedLen(b, i)+i-start)
			}
			out = append(out, b[seg:i]...)
			i++
			if i >= len(b) {
				return "", false
			}
			switch b[i] {
			case '"', '\\', '/':
				out = append(out, b[i])
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(b[i+1:])
				if r < 0 {
					return "", false
				}
				i += 5
				if utf16.IsSurrogate(r) {
					r1 := rune(-1)
					if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						r1 = hex4(b[i+2:])
					}
					if dec := utf16.DecodeRune(r, r1); dec != utf8.RuneError {
						out = utf8.AppendRune(out, dec)
						i += 6
						seg = i
						continue
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
				seg = i
				continue
			default:
				return "", false
			}
			i++
			seg = i
		case c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return "", false
			}
			i += size
		}
	}
	return "", false
}

// unsafeSlice views a non-empty string's bytes (read only).
func unsafeSlice(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// quotedLen is the length of the rest of the string at b[i:], up to its
// closing quote (or the end of b).
func quotedLen(b []byte, i int) int {
	j := i
	for j < len(b) && b[j] != '"' {
		if b[j] == '\\' {
			j++
		}
		j++
	}
	return min(j, len(b)) - i
}

// hex4 parses 4 hex digits, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number skips a JSON number at d.i.
func (d *jdec) number() bool {
	b, i := d.b, d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	d.i = i
	return true
}

// skip validates and skips any value.
func (d *jdec) skip(depth int) bool {
	switch c := d.peek(); c {
	case '"':
		_, ok := d.str()
		return ok
	case '{':
		if depth >= maxSkipDepth {
			return false
		}
		return d.object(func(string) bool { return d.skip(depth + 1) })
	case '[':
		if depth >= maxSkipDepth {
			return false
		}
		return d.array(func() bool { return d.skip(depth + 1) })
	case 't':
		return d.lit("true")
	case 'f':
		return d.lit("false")
	case 'n':
		return d.lit("null")
	default:
		if c == '-' || isDigit(c) {
			return d.number()
		}
		return false
	}
}

// object decodes the object at d.i, calling member for each member with
// d.i at its value; member must consume the value.
func (d *jdec) object(member func(key string) bool) bool {
	if d.peek() != '{' {
		return false
	}
	d.i++
	if d.peek() == '}' {
		d.i++
		return true
	}
	for {
		if d.peek() != '"' {
			return false
		}
		key, ok := d.str()
		if !ok || d.peek() != ':' {
			return false
		}
		d.i++
		d.ws()
		if !member(key) {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// array decodes the array at d.i, calling elem with d.i at each element.
func (d *jdec) array(elem func() bool) bool {
	if d.peek() != '[' {
		return false
	}
	d.i++
	if d.peek() == ']' {
		d.i++
		return true
	}
	for {
		d.ws()
		if !elem() {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return true
		default:
			return false
		}
	}
}

// null consumes a null at d.i.
func (d *jdec) null() bool { return d.peek() == 'n' && d.lit("null") }

// ---- Member types ----

// field matches key to a member name as encoding/json does: exactly, or
// else case-insensitively. seen catches a repeated member (encoding/json
// merges those in ways not worth copying: we fall back).
func field(key string, names []string, seen *uint32) (int, bool) {
	f := -1
	for i, n := range names {
		if key == n {
			f = i
			break
		}
	}
	if f < 0 {
		for i, n := range names {
			if strings.EqualFold(key, n) {
				f = i
				break
			}
		}
	}
	if f < 0 {
		return -1, true
	}
	if *seen&(1<<f) != 0 {
		return f, false
	}
	*seen |= 1 << f
	return f, true
}

// member dispatches one object member: unknown names are skipped.
func (d *jdec) member(key string, names []string, seen *uint32, set func(f int) bool) bool {
	f, ok := field(key, names, seen)
	if !ok {
		return false
	}
	if f < 0 {
		return d.skip(1)
	}
	return set(f)
}

// string member: null leaves it unchanged.
func (d *jdec) strVal(dst *string) bool {
	switch d.peek() {
	case 'n':
		return d.lit("null")
	case '"':
		s, ok := d.str()
		*dst = s
		return ok
	}
	return false
}

// newStr returns a pointer to a copy of s held in d.strs (one allocation for
// up to 16 pointers). clone copies the bytes too, for strings the engine
// keeps (they would otherwise keep the whole request body alive).
func (d *jdec) newStr(s string, clone bool) *string {
	if len(d.strs) == cap(d.strs) {
		d.strs = make([]string, 0, 16)
	}
	if clone {
		s = strings.Clone(s)
	}
	d.strs = append(d.strs, s)
	return &d.strs[len(d.strs)-1]
}

// *string member: null sets nil.
func (d *jdec) strPtr(dst **string, clone bool) bool {
	switch d.peek() {
	case 'n':
		*dst = nil
		return d.lit("null")
	case '"':
		s, ok := d.str()
		if !ok {
			return false
		}
		*dst = d.newStr(s, clone)
		return true
	}
	return false
}

// optInt member: see optInt.UnmarshalJSON, which this mirrors.
func (d *jdec) optIntVal(dst *optInt) bool {
	switch c := d.peek(); c {
	case 'n':
		return d.lit("null")
	case '"':
		s, ok := d.str()
		if ok {
			*dst = parseOptInt(s)
		}
		return ok
	default:
		start := d.i
		if !d.skip(1) {
			return false
		}
		*dst = parseOptInt(bodyString(d.b[start:d.i]))
		return true
	}
}

// []string member.
func (d *jdec) strList(dst *[]string, clone bool) bool {
	if d.peek() == 'n' {
		*dst = nil
		return d.lit("null")
	}
	out := []string{}
	ok := d.array(func() bool {
		var s string
		if d.peek() == 'n' {
			if !d.lit("null") {
				return false
			}
		} else if !d.strVal(&s) {
			return false
		}
		if clone {
			s = strings.Clone(s)
		}
		out = append(out, s)
		return true
	})
	*dst = out
	return ok
}

// []byte member: a base64 string.
func (d *jdec) bytesVal(dst *[]byte) bool {
	switch d.peek() {
	case 'n':
		*dst = nil
		return d.lit("null")
	case '"':
		s, ok := d.str()
		if !ok {
			return false
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
		n, err := base64.StdEncoding.Decode(b, []byte(s))
		if err != nil {
			return false
		}
		*dst = b[:n]
		return true
	}
	return false
}

var attrValueFields = []string{"DataType", "StringValue", "BinaryValue", "StringListValues", "BinaryListValues"}

func (d *jdec) attrValue(v *attrValue) bool {
	if d.null() {
		return true
	}
	var seen uint32
	return d.object(func(key string) bool {
		return d.member(key, attrValueFields, &seen, func(f int) bool {
			switch f {
			case 0:
				if !d.strVal(&v.DataType) {
					return false
				}
				v.DataType = strings.Clone(v.DataType)
				return true
			case 1:
				return d.strPtr(&v.StringValue, true)
			case 2:
				return d.bytesVal(&v.BinaryValue)
			case 3:
				return d.strList(&v.StringListValues, true)
			default:
				if d.peek() == 'n' {
					v.BinaryListValues = nil
					return d.lit("null")
				}
				out := [][]byte{}
				ok := d.array(func() bool {
					var b []byte
					if !d.bytesVal(&b) {
						return false
					}
					out = append(out, b)
					return true
				})
				v.BinaryListValues = out
				return ok
			}
		})
	})
}

// map[string]attrValue member.
func (d *jdec) attrMap(dst *map[string]attrValue) bool {
	if d.peek() == 'n' {
		*dst = nil
		return d.lit("null")
	}
	m := map[string]attrValue{}
	ok := d.object(func(key string) bool {
		var v attrValue
		if !d.attrValue(&v) {
			return false
		}
		m[strings.Clone(key)] = v
		return true
	})
	*dst = m
	return ok
}

// ---- Request shapes ----

// sendEntryFields are sendEntry's members, then sendMessageInput's QueueUrl.
var sendEntryFields = []string{"Id", "MessageBody", "DelaySeconds", "MessageAttributes",
	"MessageSystemAttributes", "MessageDeduplicationId", "MessageGroupId", "QueueUrl"}

// sendEntry decodes a batch entry (queueURL nil) or a SendMessage request.
func (d *jdec) sendEntry(e *sendEntry, queueURL *string) bool {
	if queueURL == nil && d.null() {
		return true
	}
	names := sendEntryFields
	if queueURL == nil {
		names = names[:len(names)-1]
	}
	var seen uint32
	return d.object(func(key string) bool {
		return d.member(key, names, &seen, func(f int) bool {
			switch f {
			case 0:
				return d.strVal(&e.Id)
			case 1:
				return d.strPtr(&e.MessageBody, false)
			case 2:
				return d.optIntVal(&e.DelaySeconds)
			case 3:
				return d.attrMap(&e.MessageAttributes)
			case 4:
				return d.attrMap(&e.MessageSystemAttributes)
			case 5:
				return d.strPtr(&e.MessageDeduplicationId, true)
			case 6:
				return d.strPtr(&e.MessageGroupId, true)
			default:
				return d.strVal(queueURL)
			}
		})
	})
}

var batchFields = []string{"QueueUrl", "Entries"}

func (d *jdec) sendBatch(in *sendMessageBatchInput) bool {
	var seen uint32
	return d.object(func(key string) bool {
		return d.member(key, batchFields, &seen, func(f int) bool {
			if f == 0 {
				return d.strVal(&in.QueueUrl)
			}
			return decodeEntries(d, &in.Entries, func(e *sendEntry) bool { return d.sendEntry(e, nil) })
		})
	})
}

var receiveFields = []string{"QueueUrl", "MaxNumberOfMessages", "VisibilityTimeout", "WaitTimeSeconds",
	"AttributeNames", "MessageSystemAttributeNames", "MessageAttributeNames", "ReceiveRequestAttemptId"}

func (d *jdec) receive(in *receiveMessageInput) bool {
	var seen uint32
	return d.object(func(key string) bool {
		return d.member(key, receiveFields, &seen, func(f int) bool {
			switch f {
			case 0:
				return d.strVal(&in.QueueUrl)
			case 1:
				return d.optIntVal(&in.MaxNumberOfMessages)
			case 2:
				return d.optIntVal(&in.VisibilityTimeout)
			case 3:
				return d.optIntVal(&in.WaitTimeSeconds)
			case 4:
				return d.strList(&in.AttributeNames, false)
			case 5:
				return d.strList(&in.MessageSystemAttributeNames, false)
			case 6:
				return d.strList(&in.MessageAttributeNames, false)
			default:
				return d.strPtr(&in.ReceiveRequestAttemptId, true)
			}
		})
	})
}

// handleFields: DeleteMessage has the first two, ChangeMessageVisibility
// all three; handleEntry has Id in place of QueueUrl.
var (
	handleFields      = []string{"QueueUrl", "ReceiptHandle", "VisibilityTimeout"}
	handleEntryFields = []string{"Id", "ReceiptHandle", "VisibilityTimeout"}
)

func (d *jdec) handle(in *changeVisibilityInput, visibility bool) bool {
	names := handleFields
	if !visibility {
		names = names[:2]
	}
	var seen uint32
	return d.object(func(key string) bool {
		return d.member(key, names, &seen, func(f int) bool {
			switch f {
			case 0:
				return d.strVal(&in.QueueUrl)
			case 1:
				return d.strVal(&in.ReceiptHandle)
			default:
				return d.optIntVal(&in.VisibilityTimeout)
			}
		})
	})
}

func (d *jdec) handleBatch(in *batchHandleInput) bool {
	var seen uint32
	return d.object(func(key string) bool {
		return d.member(key, batchFields, &seen, func(f int) bool {
			if f == 0 {
				return d.strVal(&in.QueueUrl)
			}
			return decodeEntries(d, &in.Entries, func(e *handleEntry) bool {
				if d.null() {
					return true
				}
				var seen uint32
				return d.object(func(key string) bool {
					return d.member(key, handleEntryFields, &seen, func(f int) bool {
						switch f {
						case 0:
							return d.strVal(&e.Id)
						case 1:
							return d.strVal(&e.ReceiptHandle)
						default:
							return d.optIntVal(&e.VisibilityTimeout)
						}
					})
				})
			})
		})
	})
}

// decodeEntries decodes a batch's Entries array (or null) into *dst, each
// element with entry; batches hold at most 10 entries, so that is the
// capacity reserved.
func decodeEntries[T any](d *jdec, dst *[]T, entry func(*T) bool) bool {
	if d.peek() == 'n' {
		*dst = nil
		return d.lit("null")
	}
	out := make([]T, 0, 10)
	ok := d.array(func() bool {
		var zero T
		out = append(out, zero)
		return entry(&out[len(out)-1])
	})
	*dst = out
	return ok
}
