package httpauth

import (
	"bufio"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Password hashes are PBKDF2-HMAC-SHA256, written as
//
//	pbkdf2-sha256$<iterations>$<salt>$<key>
//
// with salt (16 bytes) and key (32 bytes) in unpadded standard base64.
// PBKDF2 is in the standard library (no new dependency); 600,000
// iterations is OWASP's current figure for it. A hash never leaves the
// config file; the middleware verifies a password once and then
// remembers a keyed digest of it (see cache in httpauth.go), so the cost
// is paid on the first request of a session, not on every request.

const (
	hashScheme        = "pbkdf2-sha256"
	DefaultIterations = 600_000
	minIterations     = 10_000
	saltLen           = 16
	keyLen            = 32
)

// HashPassword returns the hash of password to put in the config file.
func HashPassword(password string) (string, error) {
	return hashPassword(password, DefaultIterations)
}

func hashPassword(password string, iter int) (string, error) {
	if password == "" {
		return "", errors.New("empty password")
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	dk, err := pbkdf2.Key(sha256.New, password, salt, iter, keyLen)
	if err != nil {
		return "", err
	}
	enc := base64.RawStdEncoding
	return hashScheme + "$" + strconv.Itoa(iter) + "$" + enc.EncodeToString(salt) + "$" + enc.EncodeToString(dk), nil
}

// passwordHash is a parsed hash.
type passwordHash struct {
	iter int
	salt []byte
	key  []byte
}

// parseHash checks the format. Its errors never quote the hash.
func parseHash(s string) (*passwordHash, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 4 || parts[0] != hashScheme {
		return nil, errors.New("not a " + hashScheme + "$<iterations>$<salt>$<key> hash (make one with `sluice hash-password`)")
	}
	iter, err := strconv.Atoi(parts[1])
	if err != nil || iter < minIterations || iter > 100_000_000 {
		return nil, fmt.Errorf("iterations must be a number from %d to 100000000", minIterations)
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[2])
	if err != nil || len(salt) < 8 {
		return nil, errors.New("salt is not base64 of at least 8 bytes")
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[3])
	if err != nil || len(key) < 16 {
		return nil, errors.New("key is not base64 of at least 16 bytes")
	}
	return &passwordHash{iter: iter, salt: salt, key: key}, nil
}

// verify reports whether password matches, in time independent of where
// the two differ.
func (h *passwordHash) verify(password string) bool {
	dk, err := pbkdf2.Key(sha256.New, password, h.salt, h.iter, len(h.key))
	return err == nil && subtle.ConstantTimeCompare(dk, h.key) == 1
}

// VerifyPassword reports whether password matches hash (a HashPassword
// result). A malformed hash matches nothing.
func VerifyPassword(hash, password string) bool {
	h, err := parseHash(hash)
	return err == nil && h.verify(password)
}

// HashPasswordCommand is the body of `sluice hash-password`: it reads the
// password from the first line of in (so it stays out of argv and shell
// history; pipe it, or type it at the prompt) and writes the hash and a
// newline to out.
//
//	case "hash-password":
//		err = httpauth.HashPasswordCommand(os.Stdin, os.Stdout)
func HashPasswordCommand(in io.Reader, out io.Writer) error {
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		if errors.Is(err, io.EOF) {
			return errors.New("hash-password: no password on standard input")
		}
		return fmt.Errorf("hash-password: %w", err)
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return errors.New("hash-password: empty password")
	}
	h, err := HashPassword(password)
	if err != nil {
		return fmt.Errorf("hash-password: %w", err)
	}
	_, err = fmt.Fprintln(out, h)
	return err
}
