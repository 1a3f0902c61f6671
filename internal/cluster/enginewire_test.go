package cluster

import (
	"bytes"
	"testing"

	"github.com/sluicemq/sluice/internal/server"
)

// TestEngineCallsToAnOlderLeader: an engine call goes to a shard's leader
// in the binary wire when its advertisement says it reads it (every
// leader of this build), and in gob to one whose advertisement does not
// (a leader of an older build, during a rolling upgrade); other paths'
// bodies go as they are.
func TestEngineCallsToAnOlderLeader(t *testing.T) {
	body, err := server.ReserveNameCall("orders", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	asGob, err := server.EngineCallAsGob(body)
	if err != nil || bytes.Equal(asGob, body) || len(asGob) == 0 || asGob[0] == 0 {
		t.Fatalf("the call in gob: %x, %v", asGob, err)
	}
	for _, tc := range []struct {
		ad   Advertisement
		path string
		want []byte
	}{
		{Advertisement{Term: 3, SQS: "x", EngineWire: true}, server.ShardEnginePath, body},
		{Advertisement{Term: 3, SQS: "x"}, server.ShardEnginePath, asGob},
		{Advertisement{Term: 3, SQS: "x"}, server.ShardDefinitionsPath, body},
	} {
		got, err := bodyFor(tc.ad, tc.path, body)
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Fatalf("%+v %s: %x, %v; want %x", tc.ad, tc.path, got, err, tc.want)
		}
	}
}
