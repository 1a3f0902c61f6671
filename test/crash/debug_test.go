package crash

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDebugListener: --debug-listen serves the Go runtime's profiles on a
// listener of its own, named in the ready file, and the API listener does
// not serve them; a non-loopback address is refused before anything
// starts.
func TestDebugListener(t *testing.T) {
	bin := Binary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := Start(ctx, bin, dir, 60*time.Second, "--debug-listen", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Kill() })
	if srv.Debug == "" || srv.Debug == srv.Addr {
		t.Fatalf("ready file: debug %q (API %q)", srv.Debug, srv.Addr)
	}
	get := func(url string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://" + srv.Debug + "/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile:") {
		t.Fatalf("heap profile: %d %.200q", code, body)
	}
	if code, body := get("http://" + srv.Debug + "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile:") {
		t.Fatalf("goroutine profile: %d %.200q", code, body)
	}
	if code, body := get(srv.URL() + "/debug/pprof/"); code == 200 || strings.Contains(body, "goroutine") {
		t.Fatalf("the API listener serves the profiles: %d %.200q", code, body)
	}
	if code, _ := get("http://" + srv.Debug + "/"); code != 404 {
		t.Fatalf("the debug listener serves more than the profiles: %d", code)
	}
	if err := srv.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	logs, err := os.ReadFile(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "debug listener serving Go runtime profiles") {
		t.Fatalf("no startup line for the debug listener in:\n%s", logs)
	}

	// Beyond loopback: refused, with the reason, even with
	// --allow-non-loopback.
	dir2 := t.TempDir()
	if s2, err := Start(ctx, bin, dir2, 20*time.Second, "--debug-listen", "0.0.0.0:0", "--allow-non-loopback"); err == nil {
		_ = s2.Kill()
		t.Fatal("a debug listener beyond loopback started")
	}
	logs, err = os.ReadFile(filepath.Join(dir2, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), `debug_listen: "0.0.0.0:0" is not a loopback address`) {
		t.Fatalf("refusal not explained:\n%s", logs)
	}
}
