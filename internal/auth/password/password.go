// Package password holds the salted SHA-256 password-hash format of AMQP
// users ([amqp.users] in the config, amqp.User.PasswordHash):
//
//	sha256:<salt-hex>:<hash-hex>    hash = SHA-256(salt || password)
//
// It is a leaf (standard library only) so that both the AMQP front-end,
// which verifies these hashes, and cmd/sluice, whose `hash-password --amqp`
// makes them, can use it without cmd/sluice importing the front-end.
// The HTTP users' PBKDF2 hashes live in internal/auth/httpauth.
package password

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"strings"
)

// Format names the accepted form, for error messages.
const Format = "sha256:<salt-hex>:<hash-hex>"

// saltLen is the salt length Hash writes, in bytes.
const saltLen = 16

// Hash returns the hash of password with a fresh random salt, in Format.
func Hash(password string) string {
	salt := make([]byte, saltLen)
	// crypto/rand.Read never returns an error (it crashes the program if
	// the system's generator fails), so there is nothing to check.
	_, _ = rand.Read(salt)
	return "sha256:" + hex.EncodeToString(salt) + ":" + hex.EncodeToString(salted(salt, password))
}

// Verifier checks passwords against one parsed hash.
type Verifier struct {
	salt, want []byte
}

// Parse checks that hash is in Format. Its errors never quote the hash.
func Parse(hash string) (*Verifier, error) {
	parts := strings.Split(hash, ":")
	if len(parts) != 3 || parts[0] != "sha256" {
		return nil, errors.New("must be " + Format)
	}
	salt, err1 := hex.DecodeString(parts[1])
	want, err2 := hex.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(want) != sha256.Size {
		return nil, errors.New("is not valid hex")
	}
	return &Verifier{salt: salt, want: want}, nil
}

// Verify reports whether password matches, in time independent of where
// the two differ.
func (v *Verifier) Verify(password string) bool {
	return subtle.ConstantTimeCompare(salted(v.salt, password), v.want) == 1
}

func salted(salt []byte, password string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(password))
	return h.Sum(nil)
}
