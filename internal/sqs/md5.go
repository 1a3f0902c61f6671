package sqs

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sort"
	"strings"

	"github.com/sluicemq/sluice/internal/engine"
)

// md5Hex is MD5OfMessageBody / MD5OfBody: the lower-case hex MD5 of the
// body's bytes (reference §3.3).
func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// md5OfAttributes is MD5OfMessageAttributes (and, over the system
// attributes, MD5OfMessageSystemAttributes) as the AWS SQS Developer Guide
// defines it: attributes sorted by name; for each, a 4-byte big-endian length
// and the name, a length and the data type, one transport byte (1 for String
// and Number, 2 for Binary), and a length and the value bytes. It returns ""
// for no attributes: SQS then leaves the member out.
func md5OfAttributes(attrs []engine.Attribute) string {
	if len(attrs) == 0 {
		return ""
	}
	sorted := make([]engine.Attribute, len(attrs))
	copy(sorted, attrs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	h := md5.New()
	for _, a := range sorted {
		writeLenPrefixed(h, []byte(a.Name))
		writeLenPrefixed(h, []byte(a.DataType))
		if isBinaryType(a.DataType) {
			h.Write([]byte{2})
			writeLenPrefixed(h, a.BinaryValue)
		} else {
			h.Write([]byte{1})
			writeLenPrefixed(h, []byte(a.StringValue))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeLenPrefixed(h hash.Hash, b []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// isBinaryType reports whether a message attribute data type ("Binary" or
// "Binary.<suffix>") carries BinaryValue.
func isBinaryType(dataType string) bool {
	return baseType(dataType) == "Binary"
}

// baseType strips a custom ".suffix" from a data type.
func baseType(dataType string) string {
	if i := strings.IndexByte(dataType, '.'); i >= 0 {
		return dataType[:i]
	}
	return dataType
}
