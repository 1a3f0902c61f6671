package worker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The worker is its own Go module, so that SDK users do not inherit the
// broker's dependencies; its tests therefore cannot link the broker in.
// They run the real thing instead: TestMain builds cmd/sluice from the
// repository root once, and every test starts that binary on 127.0.0.1:0
// and learns its ports from the --ready-file it writes once listening.

// sluiceBinary is the broker built by TestMain ("" when the build failed;
// buildErr says why). Set once before any test runs, read-only after.
var (
	sluiceBinary string
	buildErr     error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-worker-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBinary, buildErr = buildSluice(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildSluice builds ../cmd/sluice (the root module) into dir.
func buildSluice(dir string) (string, error) {
	bin := filepath.Join(dir, "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
	}
	return bin, nil
}

// sluiced is a running broker process.
type sluiced struct {
	SQSAddr, AMQPAddr string
	cmd               *exec.Cmd
	done              chan error
}

// startSluiced starts the broker on 127.0.0.1:0 with its data in dataDir
// and waits for its ready file.
func startSluiced(dataDir string) (*sluiced, error) {
	if buildErr != nil {
		return nil, buildErr
	}
	ready := filepath.Join(dataDir, "ready.json")
	cmd := exec.Command(sluiceBinary, "server", "--data-dir", filepath.Join(dataDir, "data"),
		"--sqs-listen", "127.0.0.1:0", "--amqp-listen", "127.0.0.1:0", "--ready-file", ready, "--log-level", "error")
	if os.Getenv("WORKER_TEST_LOG") != "" {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &sluiced{cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			var r struct{ SQS, AMQP string }
			if err := json.Unmarshal(b, &r); err != nil {
				s.stop()
				return nil, fmt.Errorf("ready file: %v", err)
			}
			s.SQSAddr, s.AMQPAddr = r.SQS, r.AMQP
			return s, nil
		}
		select {
		case err := <-s.done:
			return nil, fmt.Errorf("sluice exited before it was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("sluice did not become ready in 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *sluiced) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return errors.New("sluice did not stop within 30 s of SIGTERM")
	}
}
