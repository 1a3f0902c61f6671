package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dockerfile is the parsed ../../Dockerfile: its stages' instructions,
// continuation lines joined.
type dockerfile struct {
	stages [][]instruction
}

type instruction struct{ op, args string }

func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	var cur string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if rest, ok := strings.CutSuffix(line, "\\"); ok {
			cur += rest + " "
			continue
		}
		cur += line
		op, args, _ := strings.Cut(cur, " ")
		op = strings.ToUpper(op)
		cur = ""
		if op == "FROM" {
			d.stages = append(d.stages, nil)
		}
		if len(d.stages) == 0 {
			t.Fatalf("%s before the first FROM", op)
		}
		d.stages[len(d.stages)-1] = append(d.stages[len(d.stages)-1], instruction{op, strings.TrimSpace(args)})
	}
	return d
}

func (d dockerfile) find(stage int, op string) []string {
	var out []string
	for _, in := range d.stages[stage] {
		if in.op == op {
			out = append(out, in.args)
		}
	}
	return out
}

// The container image definition: multi-stage, a static binary stamped
// with the version, a non-root user, the data on a volume, and listeners
// beyond loopback that the broker refuses until credentials or the
// explicit opt-in (SLUICE_ALLOW_NON_LOOPBACK) are given. No container
// engine runs on CI, so this checks the file and runs its command line.
func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t, "../../Dockerfile")
	if len(d.stages) < 2 {
		t.Fatalf("%d stage(s); want a build stage and a runtime stage", len(d.stages))
	}
	build := strings.Join(d.find(0, "RUN"), "\n")
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/sluice", "-X main.version=", "-X main.commit=", "-X main.date="} {
		if !strings.Contains(build, want) {
			t.Errorf("build stage lacks %q", want)
		}
	}
	last := len(d.stages) - 1
	users := d.find(last, "USER")
	if len(users) != 1 || strings.HasPrefix(users[0], "0") || strings.HasPrefix(users[0], "root") {
		t.Errorf("runtime USER %q; want one non-root user", users)
	}
	if v := d.find(last, "VOLUME"); len(v) != 1 || !strings.Contains(v[0], `"/data"`) {
		t.Errorf("VOLUME %q; want /data", v)
	}
	var entry, cmd []string
	for _, in := range []struct {
		op  string
		dst *[]string
	}{{"ENTRYPOINT", &entry}, {"CMD", &cmd}} {
		v := d.find(last, in.op)
		if len(v) != 1 || json.Unmarshal([]byte(v[0]), in.dst) != nil {
			t.Fatalf("%s %q: want one exec-form (JSON) instruction", in.op, v)
		}
	}
	if len(entry) != 1 || !strings.HasSuffix(entry[0], "/sluice") {
		t.Fatalf("ENTRYPOINT %q", entry)
	}
	if len(cmd) == 0 || cmd[0] != "server" || !strings.Contains(strings.Join(cmd, " "), "--data-dir /data") {
		t.Fatalf("CMD %q: want sluice server with its data on the volume", cmd)
	}
	for _, a := range cmd {
		if strings.Contains(a, "allow-non-loopback") {
			t.Fatal("the image must not open its listeners without credentials by default")
		}
	}

	// The image's command, as the binary sees it (data dir moved to a temp
	// dir): refused, naming the way out, until the opt-in is given.
	args := append([]string{}, cmd...)
	for i := range args {
		if args[i] == "/data" {
			args[i] = filepath.Join(t.TempDir(), "data")
		}
	}
	var out bytes.Buffer
	if code := runServer(args[1:], &out, func(string) string { return "" }); code != 2 ||
		!strings.Contains(out.String(), "not a loopback address") || !strings.Contains(out.String(), "allow_non_loopback") {
		t.Fatalf("the image's command without credentials: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := runServer(args[1:], &out, func(k string) string {
		if k == AllowNonLoopbackEnv {
			return "maybe"
		}
		return ""
	}); code != 2 || !strings.Contains(out.String(), AllowNonLoopbackEnv) {
		t.Fatalf("a bad %s: exit %d, %q", AllowNonLoopbackEnv, code, out.String())
	}
}
