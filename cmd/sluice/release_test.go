package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// .goreleaser.yaml builds what `make build` and the Dockerfile build: the
// ./cmd/sluice binary, CGO off, stamped through the variables main
// declares. This is the cheap guard run with the tests; `goreleaser
// check` is the full validation where goreleaser can be installed.
func TestReleaseConfig(t *testing.T) {
	data, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(data)
	for _, want := range []string{"version: 2", "main: ./cmd/sluice", "CGO_ENABLED=0", "binary: sluice"} {
		if !strings.Contains(cfg, want) {
			t.Errorf(".goreleaser.yaml lacks %q", want)
		}
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	stamped := regexp.MustCompile(`-X main\.(\w+)=`).FindAllStringSubmatch(cfg, -1)
	if len(stamped) != 3 {
		t.Fatalf("ldflags stamp %d variables, want version, commit and date", len(stamped))
	}
	for _, m := range stamped {
		if !regexp.MustCompile(`(?m)^\s+` + m[1] + `\s+= `).Match(src) {
			t.Errorf("ldflags set main.%s, which main.go does not declare as a variable", m[1])
		}
	}
	for _, line := range strings.Split(cfg, "\n") {
		if strings.Contains(line, "\t") {
			t.Errorf("tab in YAML: %q", line)
		}
	}
}
