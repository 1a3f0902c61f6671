package brokertest

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/internal/server"
)

// TestStartServesAndStops starts a broker from options that ask for the
// default listeners (server.DefaultOptions: fixed ports), checks that both listeners were moved to 127.0.0.1:0 and answer
// (HTTP /health, an AMQP handshake), and that Stop ends Run cleanly and
// can be called again.
func TestStartServesAndStops(t *testing.T) {
	o := Options(t)
	def := server.DefaultOptions()
	o.SQSListen, o.AMQPListen = def.SQSListen, def.AMQPListen
	b := Start(t, o, nil)
	for name, addr := range map[string]string{"sqs": b.Server.SQSAddr(), "amqp": b.Server.AMQPAddr()} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || addr == def.SQSListen || addr == def.AMQPListen {
			t.Fatalf("%s listener on %q, want 127.0.0.1 and a port chosen by the kernel", name, addr)
		}
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, b.SQSURL()+"/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health: %d", resp.StatusCode)
	}
	if !strings.HasPrefix(b.AMQPURL(), "amqp://guest:guest@127.0.0.1:") {
		t.Fatalf("AMQPURL %q", b.AMQPURL())
	}
	conn, err := amqp.Dial(b.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := http.DefaultClient.Get(b.SQSURL() + "/health"); err == nil {
		t.Fatal("the HTTP listener still answers after Stop")
	}
}

// TestAMQPOff: with the AMQP listener off, AMQPURL is empty and the
// broker still serves SQS.
func TestAMQPOff(t *testing.T) {
	o := Options(t)
	o.AMQPListen = ""
	b := Start(t, o, nil)
	if u := b.AMQPURL(); u != "" {
		t.Fatalf("AMQPURL %q with AMQP off", u)
	}
	resp, err := http.Get(b.SQSURL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}
