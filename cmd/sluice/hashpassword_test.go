package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/auth/password"
)

// hash-password --amqp prints a hash the AMQP front-end accepts (it parses
// [[amqp_users]] password_hash with password.Parse) for the password on
// standard input, and refuses an empty one.
func TestHashPasswordAMQP(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runHashPassword([]string{"--amqp"}, strings.NewReader("s3cret\n"), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	v, err := password.Parse(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if !v.Verify("s3cret") || v.Verify("s3cret\n") || v.Verify("other") {
		t.Errorf("hash %q does not verify exactly the password given", out.String())
	}

	out.Reset()
	errb.Reset()
	if code := runHashPassword([]string{"--amqp"}, strings.NewReader("\n"), &out, &errb); code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), "no password") {
		t.Errorf("empty password: exit %d, stdout %q, stderr %q; want 1, nothing, a message", code, out.String(), errb.String())
	}
}
