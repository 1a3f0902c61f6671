package amqp

import (
	"regexp"
	"strings"
	"testing"
)

// The patterns matchesAnything treats as "everything" must match every
// name the regexp would be asked about, and the shortcut must not widen
// any other pattern.
func TestPermissionShortcut(t *testing.T) {
	names := []string{"", "q", "a\nb", "\n", "\x00\xff", "amq.gen-x", "名前", strings.Repeat("z", 255)}
	for _, src := range []string{".*", "^.*", ".*$", "(.*)"} {
		if !matchesAnything(src) {
			t.Fatalf("%q not recognised", src)
		}
		re := regexp.MustCompile(src)
		for _, n := range names {
			if !re.MatchString(n) {
				t.Fatalf("%q does not match %q: the shortcut would allow what the regexp refuses", src, n)
			}
		}
	}
	for _, src := range []string{"^.*$", "^$", "^q", "", ".+"} {
		if matchesAnything(src) {
			t.Fatalf("%q taken as matching everything", src)
		}
	}
	u, err := compileUser(User{Name: "u", Password: "p", Permissions: map[string]Permission{
		"/": {Configure: "^own-", Write: ".*", Read: "^.*$"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kind int
		name string
		want bool
	}{
		{permConfigure, "own-q", true}, {permConfigure, "q", false},
		{permWrite, "a\nb", true}, {permWrite, "", true},
		{permRead, "q", true}, {permRead, "a\nb", false},
	} {
		if got := u.allowed("/", c.kind, c.name); got != c.want {
			t.Errorf("allowed(%d, %q) = %v, want %v", c.kind, c.name, got, c.want)
		}
	}
	if u.allowed("other", permWrite, "q") {
		t.Error("a vhost without permissions allowed a write")
	}
}
