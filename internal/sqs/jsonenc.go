package sqs

import (
	"encoding/base64"
	"encoding/binary"
	"unicode/utf8"
)

// Append-style JSON encoders for the hot response shapes. Each produces
// the bytes marshalJSON (encoding/json without HTML escaping) produces for
// the same value, member order and omitempty included: TestAppendJSONMatches
// and FuzzAppendJSON compare the two.

// jsonAppender is implemented by outputs with a hand-written encoder.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

// appendJSONString appends s as a JSON string the way encoding/json does
// with escapeHTML off: '"', '\\' and control characters escaped (\b \f \n
// \r \t by name), invalid UTF-8 as \ufffd, U+2028 and U+2029 as escapes.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) && plainWord(binary.LittleEndian.Uint64(unsafeBytes(s[i:i+8]))) {
			i += 8
			continue
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// unsafeBytes views a string's bytes (read only).
func unsafeBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafeSlice(s)
}

// appendMember appends "name": (name needs no escaping) after a comma
// unless it is the first member.
func appendMember(b []byte, first bool, name string) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func (o *sendMessageOutput) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = o.appendMembers(b, true)
	return append(b, '}')
}

func (o *sendMessageOutput) appendMembers(b []byte, first bool) []byte {
	b = appendMember(b, first, "MessageId")
	b = appendJSONString(b, o.MessageId)
	b = appendMember(b, false, "MD5OfMessageBody")
	b = appendJSONString(b, o.MD5OfMessageBody)
	if o.MD5OfMessageAttributes != "" {
		b = appendMember(b, false, "MD5OfMessageAttributes")
		b = appendJSONString(b, o.MD5OfMessageAttributes)
	}
	if o.MD5OfMessageSystemAttributes != "" {
		b = appendMember(b, false, "MD5OfMessageSystemAttributes")
		b = appendJSONString(b, o.MD5OfMessageSystemAttributes)
	}
	if o.SequenceNumber != "" {
		b = appendMember(b, false, "SequenceNumber")
		b = appendJSONString(b, o.SequenceNumber)
	}
	return b
}

func appendBatchErrors(b []byte, failed []batchError) []byte {
	if failed == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range failed {
		f := &failed[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Id":`...)
		b = appendJSONString(b, f.Id)
		if f.SenderFault {
			b = append(b, `,"SenderFault":true`...)
		} else {
			b = append(b, `,"SenderFault":false`...)
		}
		b = append(b, `,"Code":`...)
		b = appendJSONString(b, f.Code)
		if f.Message != "" {
			b = append(b, `,"Message":`...)
			b = appendJSONString(b, f.Message)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func (o *sendMessageBatchOutput) appendJSON(b []byte) []byte {
	b = append(b, `{"Successful":`...)
	if o.Successful == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range o.Successful {
			s := &o.Successful[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"Id":`...)
			b = appendJSONString(b, s.Id)
			b = s.sendMessageOutput.appendMembers(b, false)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"Failed":`...)
	b = appendBatchErrors(b, o.Failed)
	return append(b, '}')
}

func (o *handleBatchOutput) appendJSON(b []byte) []byte {
	b = append(b, `{"Successful":`...)
	if o.Successful == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range o.Successful {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"Id":`...)
			b = appendJSONString(b, o.Successful[i].Id)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"Failed":`...)
	b = appendBatchErrors(b, o.Failed)
	return append(b, '}')
}

func (o *receiveMessageOutput) appendJSON(b []byte) []byte {
	if len(o.Messages) == 0 {
		return append(b, '{', '}')
	}
	b = append(b, `{"Messages":[`...)
	for i := range o.Messages {
		m := &o.Messages[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"MessageId":`...)
		b = appendJSONString(b, m.MessageId)
		b = append(b, `,"ReceiptHandle":`...)
		b = appendJSONString(b, m.ReceiptHandle)
		b = append(b, `,"MD5OfBody":`...)
		b = appendJSONString(b, m.MD5OfBody)
		b = append(b, `,"Body":`...)
		b = appendJSONString(b, m.Body)
		if len(m.Attributes) > 0 {
			b = append(b, `,"Attributes":{`...)
			for j, k := range sortedKeys(m.Attributes) {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, k)
				b = append(b, ':')
				b = appendJSONString(b, m.Attributes[k])
			}
			b = append(b, '}')
		}
		if m.MD5OfMessageAttributes != "" {
			b = append(b, `,"MD5OfMessageAttributes":`...)
			b = appendJSONString(b, m.MD5OfMessageAttributes)
		}
		if len(m.MessageAttributes) > 0 {
			b = append(b, `,"MessageAttributes":{`...)
			for j, k := range sortedKeys(m.MessageAttributes) {
				a := m.MessageAttributes[k]
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, k)
				b = append(b, `:{"DataType":`...)
				b = appendJSONString(b, a.DataType)
				if a.StringValue != "" {
					b = append(b, `,"StringValue":`...)
					b = appendJSONString(b, a.StringValue)
				}
				if len(a.BinaryValue) > 0 {
					b = append(b, `,"BinaryValue":"`...)
					b = base64.StdEncoding.AppendEncode(b, a.BinaryValue)
					b = append(b, '"')
				}
				b = append(b, '}')
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	return append(b, ']', '}')
}
