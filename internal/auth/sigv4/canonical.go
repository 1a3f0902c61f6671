package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// This file builds the SigV4 canonical request the way the SDKs do
// (aws-sdk-go-v2's v4 signer and botocore's SigV4Auth, for a service that
// is not S3):
//
//	METHOD \n
//	canonical URI \n      the path as sent, percent-encoded once more
//	canonical query \n    every name and value RFC 3986-encoded, sorted
//	canonical headers \n  "name:value\n" per signed header, in the order given
//	signed headers \n     as listed in the credential
//	payload hash          hex SHA-256 of the body (or X-Amz-Content-Sha256)
//
// The string to sign is "AWS4-HMAC-SHA256\n<timestamp>\n<scope>\n<hex
// SHA-256 of the canonical request>", and the signature the hex HMAC of
// it under the key derived from the secret, the scope date, region and
// service.

const algorithm = "AWS4-HMAC-SHA256"

// emptySHA256 is the payload hash of an empty body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// param is one query parameter, decoded.
type param struct{ k, v string }

// splitQuery decodes a raw query string the way url.ParseQuery does
// ('+' is a space, empty segments are skipped) but keeps going past
// segments it cannot decode, which it keeps raw: the signature then fails
// to match rather than the verifier silently dropping a parameter.
func splitQuery(raw string) []param {
	var ps []param
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if dv, err := url.QueryUnescape(v); err == nil {
			v = dv
		}
		ps = append(ps, param{k, v})
	}
	return ps
}

// canonicalQuery encodes and sorts the parameters, leaving out
// X-Amz-Signature when presigned (it cannot sign itself). The sort is on
// the encoded forms, key then value, as SigV4 requires.
func canonicalQuery(ps []param, presigned bool) string {
	enc := make([]param, 0, len(ps))
	for _, p := range ps {
		if presigned && p.k == "X-Amz-Signature" {
			continue
		}
		enc = append(enc, param{uriEncode(p.k, false), uriEncode(p.v, false)})
	}
	sort.Slice(enc, func(i, j int) bool {
		if enc[i].k != enc[j].k {
			return enc[i].k < enc[j].k
		}
		return enc[i].v < enc[j].v
	})
	var b strings.Builder
	for i, p := range enc {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.k)
		b.WriteByte('=')
		b.WriteString(p.v)
	}
	return b.String()
}

// uriEncode percent-encodes (upper-case hex) every byte outside the RFC
// 3986 unreserved set, and '/' too unless keepSlash.
func uriEncode(s string, keepSlash bool) string {
	const hexUpper = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) && !(keepSlash && s[i] == '/') {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) || keepSlash && c == '/' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexUpper[c>>4], hexUpper[c&15])
	}
	return string(b)
}

func unreserved(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '~'
}

// canonicalURI is the request path exactly as the client sent it (still
// percent-encoded), encoded once more: SQS, like every service but S3,
// uses the SDKs' double encoding, so "/a%20b" signs as "/a%2520b".
func canonicalURI(r *http.Request) string {
	return uriEncode(rawPath(r), true)
}

// rawPath is the path of the request line before any decoding. A request
// built in-process (no RequestURI) falls back to the URL's escaped path.
func rawPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if !strings.HasPrefix(p, "/") {
		if i := strings.Index(p, "://"); i >= 0 {
			// absolute-form request line: scheme://authority/path
			rest := p[i+3:]
			p = "/"
			if j := strings.IndexByte(rest, '/'); j >= 0 {
				p = rest[j:]
			}
		} else {
			p = r.URL.EscapedPath()
		}
	}
	if p == "" {
		p = "/"
	}
	return p
}

// headerValue is the canonical value of one signed header: its values
// joined with ",", each trimmed, with runs of spaces (aws-sdk-go-v2) or of
// any white space (botocore, when allWS) collapsed to one space. It
// reports whether a value held white space other than spaces, where the
// two SDKs differ.
func headerValue(r *http.Request, name string, allWS bool) (string, bool) {
	var vals []string
	switch name {
	case "host":
		h := r.Host
		if h == "" {
			h = r.URL.Host
		}
		vals = []string{h}
	case "content-length":
		vals = r.Header["Content-Length"]
		if len(vals) == 0 && r.ContentLength >= 0 {
			vals = []string{strconv.FormatInt(r.ContentLength, 10)}
		}
	case "transfer-encoding":
		vals = r.TransferEncoding
	default:
		vals = r.Header[textproto.CanonicalMIMEHeaderKey(name)]
	}
	other := false
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		if strings.ContainsAny(v, "\t\v\f\r\n") {
			other = true
		}
		if allWS {
			b.WriteString(strings.Join(strings.Fields(v), " "))
		} else {
			b.WriteString(collapseSpaces(strings.TrimSpace(v)))
		}
	}
	return b.String(), other
}

// collapseSpaces turns every run of spaces into one space.
func collapseSpaces(s string) string {
	if !strings.Contains(s, "  ") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' && i > 0 && s[i-1] == ' ' {
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

// canonicalRequest assembles the canonical request. It reports whether
// some signed header held white space the two SDKs canonicalise
// differently (so the caller may try the other form).
func canonicalRequest(r *http.Request, query string, signedHeaders []string, signedList, payloadHash string, allWS bool) (string, bool) {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte('\n')
	b.WriteString(canonicalURI(r))
	b.WriteByte('\n')
	b.WriteString(query)
	b.WriteByte('\n')
	ambiguous := false
	for _, h := range signedHeaders {
		v, other := headerValue(r, h, allWS)
		ambiguous = ambiguous || other
		b.WriteString(h)
		b.WriteByte(':')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(signedList)
	b.WriteByte('\n')
	b.WriteString(payloadHash)
	return b.String(), ambiguous
}

// stringToSign hashes the canonical request into the string to sign.
func stringToSign(timestamp, scope, canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return algorithm + "\n" + timestamp + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
}

// signingKey derives the key for one scope:
// HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region), service), "aws4_request").
func signingKey(secret, date, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), date)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	return hmacSHA256(k, "aws4_request")
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}
