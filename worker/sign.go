package worker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// sigv4Doer signs failure reports with the SQS client's credentials
// (service "sqs", the client's region), so that a broker with SigV4 on
// accepts them from a worker's own key, for the queues that key may use,
// without an operator token.
type sigv4Doer struct {
	next   httpDoer
	creds  aws.CredentialsProvider
	region string
}

func (d *sigv4Doer) Do(req *http.Request) (*http.Response, error) {
	creds, err := d.creds.Retrieve(req.Context())
	if err != nil {
		return nil, fmt.Errorf("worker: credentials for a failure report: %w", err)
	}
	var body []byte
	if req.Body != nil {
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(req.Context(), creds, req, hex.EncodeToString(sum[:]), "sqs", d.region, time.Now()); err != nil {
		return nil, fmt.Errorf("worker: signing a failure report: %w", err)
	}
	return d.next.Do(req)
}
