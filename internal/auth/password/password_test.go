package password

import (
	"strings"
	"testing"
)

func TestHashVerify(t *testing.T) {
	h := Hash("s3cret")
	if !strings.HasPrefix(h, "sha256:") {
		t.Fatalf("Hash = %q, want the sha256: form", h)
	}
	if h2 := Hash("s3cret"); h2 == h {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	v, err := Parse(h)
	if err != nil {
		t.Fatalf("Parse(Hash(...)): %v", err)
	}
	if !v.Verify("s3cret") {
		t.Error("the right password does not verify")
	}
	for _, wrong := range []string{"", "s3cre", "s3cret!", "S3CRET"} {
		if v.Verify(wrong) {
			t.Errorf("wrong password %q verifies", wrong)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, bad := range []string{
		"",
		"s3cret",
		"md5:00:00",
		"sha256:00",
		"sha256:zz:" + strings.Repeat("00", 32),
		"sha256:00:" + strings.Repeat("zz", 32),
		"sha256:00:" + strings.Repeat("00", 31), // one byte short
		"sha256:00:" + strings.Repeat("00", 32) + ":00",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted a malformed hash", bad)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("Parse(%q) error quotes the hash: %v", bad, err)
		}
	}
}
