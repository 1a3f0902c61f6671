package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// The AMQP gauges count a real client's connection, channels and consumer,
// and drop back when it goes; the disk gauges report the watermark.
func TestAMQPAndDiskMetrics(t *testing.T) {
	s, stop := start(t, t.TempDir())
	defer stop()
	conn, err := amqp091.Dial("amqp://guest:guest@" + s.AMQPAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	ch1, _ := conn.Channel()
	if _, err := conn.Channel(); err != nil {
		t.Fatal(err)
	}
	if _, err := ch1.QueueDeclare("jobs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch1.Consume("jobs", "c1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	want := func(lines ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			m := metricsText(t, s.SQSAddr())
			ok := true
			for _, l := range lines {
				ok = ok && strings.Contains(m, "\n"+l+"\n")
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("metrics lack %q", lines)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want("sluice_amqp_connections 1", "sluice_amqp_channels 2", "sluice_amqp_consumers 1",
		"sluice_disk_min_free_bytes 2.68435456e+08")
	conn.Close()
	want("sluice_amqp_connections 0", "sluice_amqp_channels 0", "sluice_amqp_consumers 0")
	if m := metricsText(t, s.SQSAddr()); !strings.Contains(m, "\nsluice_disk_free_bytes ") {
		t.Fatal("no sluice_disk_free_bytes")
	}
}
