// Package buildinfo says which build of Sluice is running: its version,
// the commit it was built from and when that commit was made. `sluice
// version`, the startup log line and the sluice_build_info metric all read
// the same Info, so the three never disagree.
//
// Values come from two places, in this order:
//
//  1. -ldflags given to the linker (what `make build`, the container image
//     and release builds set): -X main.version=v1.2.3 -X main.commit=…
//     -X main.date=2026-11-24T15:00:00Z. cmd/sluice passes them to Read.
//  2. The build information the Go toolchain embeds in every binary
//     (runtime/debug.ReadBuildInfo): the module version for `go install
//     …@v1.2.3`, and vcs.revision / vcs.time / vcs.modified for a build
//     inside a git checkout (`go build ./cmd/sluice`, `go install
//     ./cmd/sluice`).
//
// Whatever neither source knows stays "unknown" ("dev" for the version),
// never empty, so a label or a log field is always present.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info describes one build.
type Info struct {
	// Version is a release tag (v1.2.3) or "dev" for an untagged build.
	Version string `json:"version"`
	// Commit is the VCS revision, with "-dirty" appended when the work
	// tree had uncommitted changes; "unknown" when not built from git.
	Commit string `json:"commit"`
	// Date is the commit time (or the release build time) in RFC 3339;
	// "unknown" when neither is known.
	Date string `json:"date"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// Read returns the build's Info. version, commit and date are the values
// injected with -ldflags (empty or "dev" when none were); they win over
// what the toolchain embedded.
func Read(version, commit, date string) Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(version, commit, date, bi)
}

// fromBuildInfo is Read with the toolchain's information given (nil when
// the binary has none), so tests can feed it.
func fromBuildInfo(version, commit, date string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if (info.Version == "" || info.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		var rev, at string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if info.Commit == "" && rev != "" {
			info.Commit = rev
			if modified {
				info.Commit += "-dirty"
			}
		}
		if info.Date == "" {
			info.Date = at
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	if info.Date == "" {
		info.Date = "unknown"
	}
	return info
}

// ShortCommit is the commit cut to 12 characters (keeping a "-dirty"
// mark), for log lines and the version command.
func (i Info) ShortCommit() string {
	c, dirty := i.Commit, ""
	if len(c) > 6 && c[len(c)-6:] == "-dirty" {
		c, dirty = c[:len(c)-6], "-dirty"
	}
	if len(c) > 12 {
		c = c[:12]
	}
	return c + dirty
}

// String is the line `sluice version` prints:
// "sluice v1.2.3 (commit 0123456789ab, built 2026-11-24T15:00:00Z, go1.26.0)".
func (i Info) String() string {
	return fmt.Sprintf("sluice %s (commit %s, built %s, %s)", i.Version, i.ShortCommit(), i.Date, i.GoVersion)
}
