package admin

import "testing"

// FuzzManageBodies feeds arbitrary bodies to the queue-management
// decoders (create, send): no panic, no 5xx, every error a JSON error.
func FuzzManageBodies(f *testing.F) {
	h, _ := fuzzHandler(f)
	for _, seed := range []string{
		`{"name":"orders"}`,
		`{"name":"x.fifo","fifo":true,"deadLetterQueue":"dlq","maxReceiveCount":3,"visibilityTimeoutSeconds":60}`,
		`{"name":"o","ownDeadLetterQueue":true,"maxReceiveCount":3}`,
		`{"name":"o","ownDeadLetterQueue":true,"deadLetterQueue":"dlq","maxReceiveCount":3}`,
		`{"name":"` + "\u0000" + `"}`, `{"name":"a","maxReceiveCount":-1,"deadLetterQueue":"dlq"}`,
		`{"body":"hi","attributes":{"k":"v"},"groupId":"g","deduplicationId":"d"}`,
		`{"body":"","attributes":{"":"v"}}`, `[]`, `{} trailing`, `{"unknown":1}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		checkResponse(t, serve(h, "POST", "/sluice/v1/queues", body))
		checkResponse(t, serve(h, "POST", "/sluice/v1/queues/q/messages", body))
		checkResponse(t, serve(h, "POST", "/sluice/v1/queues/f.fifo/messages", body))
	})
}
