package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/sluicemq/sluice", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-24T15:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tagged := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.4.0"}}
	for _, tc := range []struct {
		name                string
		version, commit, at string
		bi                  *debug.BuildInfo
		want                Info
	}{
		{"nothing known", "dev", "", "", nil, Info{Version: "dev", Commit: "unknown", Date: "unknown"}},
		{"git checkout", "dev", "", "", vcs, Info{Version: "dev", Commit: "0123456789abcdef0123456789abcdef01234567-dirty", Date: "2026-11-24T15:00:00Z", GoVersion: "go1.26.0"}},
		{"go install @version", "", "", "", tagged, Info{Version: "v1.4.0", Commit: "unknown", Date: "unknown", GoVersion: "go1.26.0"}},
		{"ldflags win", "v2.0.0", "abc", "2027-01-01T00:00:00Z", vcs, Info{Version: "v2.0.0", Commit: "abc", Date: "2027-01-01T00:00:00Z", GoVersion: "go1.26.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(tc.version, tc.commit, tc.at, tc.bi)
			if tc.want.GoVersion == "" {
				tc.want.GoVersion = got.GoVersion // runtime.Version()
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	i := Info{Version: "v1.2.3", Commit: "0123456789abcdef-dirty", Date: "2026-11-24T15:00:00Z", GoVersion: "go1.26.0"}
	want := "sluice v1.2.3 (commit 0123456789ab-dirty, built 2026-11-24T15:00:00Z, go1.26.0)"
	if got := i.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := Read("", "", "").String(); !strings.HasPrefix(got, "sluice ") {
		t.Fatalf("Read().String() = %q", got)
	}
}
