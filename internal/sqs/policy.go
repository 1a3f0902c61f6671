package sqs

import (
	"encoding/json"
	"strings"
)

// AddPermission / RemovePermission edit the queue's IAM-shaped Policy
// attribute: one statement per label, with the label as its Sid. The policy
// is stored, returned by GetQueueAttributes and compared by CreateQueue, but
// not enforced (requests are not authenticated).

// permissionActions are the action names AddPermission accepts ("*" for all).
func validPermissionAction(a string) bool {
	switch a {
	case "*", "SendMessage", "ReceiveMessage", "DeleteMessage", "ChangeMessageVisibility",
		"GetQueueAttributes", "GetQueueUrl", "ListDeadLetterSourceQueues", "PurgeQueue",
		"ListQueueTags", "SendMessageBatch", "DeleteMessageBatch", "ChangeMessageVisibilityBatch":
		return true
	}
	return false
}

func checkPermission(in *addPermissionInput) *apiError {
	if in.Label == "" {
		return errMissing("Label")
	}
	if len(in.Label) > 80 || !isIDChars(in.Label) {
		return errParam(in.Label, "Label", "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length.")
	}
	if len(in.AWSAccountIds) == 0 {
		return errMissing("AWSAccountIds")
	}
	for _, id := range in.AWSAccountIds {
		if id == "" || len(id) > 64 || !isIDChars(id) {
			return errParam(id, "AWSAccountId", "Invalid account id.")
		}
	}
	if len(in.Actions) == 0 {
		return errMissing("Actions")
	}
	for _, a := range in.Actions {
		if !validPermissionAction(a) {
			return errParam(a, "ActionName", "Please refer to the appropriate WSDL for a list of valid actions.")
		}
	}
	return nil
}

// policyDoc is a policy document; unknown members of a policy set with
// SetQueueAttributes are kept as they are.
type policyDoc struct {
	rest       map[string]json.RawMessage
	statements []map[string]json.RawMessage
}

// parsePolicy decodes a policy ("" is a new, empty one). Statement may be
// an array or a single object, as IAM allows.
func parsePolicy(policy, queueARN string) (*policyDoc, *apiError) {
	doc := &policyDoc{rest: map[string]json.RawMessage{}}
	if policy == "" {
		doc.rest["Version"] = json.RawMessage(`"2008-10-17"`) // what AddPermission writes on AWS
		doc.rest["Id"] = marshalJSON(queueARN + "/SQSDefaultPolicy")
		return doc, nil
	}
	if err := json.Unmarshal([]byte(policy), &doc.rest); err != nil || doc.rest == nil {
		return nil, errInvalidAttrValue(attrPolicy)
	}
	if raw, ok := doc.rest["Statement"]; ok {
		delete(doc.rest, "Statement")
		if err := json.Unmarshal(raw, &doc.statements); err != nil {
			var one map[string]json.RawMessage
			if err := json.Unmarshal(raw, &one); err != nil {
				return nil, errInvalidAttrValue(attrPolicy)
			}
			doc.statements = []map[string]json.RawMessage{one}
		}
	}
	return doc, nil
}

func (d *policyDoc) find(label string) int {
	for i, s := range d.statements {
		var sid string
		if json.Unmarshal(s["Sid"], &sid) == nil && sid == label {
			return i
		}
	}
	return -1
}

func (d *policyDoc) String() string {
	m := make(map[string]any, len(d.rest)+1)
	for k, v := range d.rest {
		m[k] = v
	}
	if len(d.statements) == 0 {
		return "" // no statements left: the queue has no policy
	}
	m["Statement"] = d.statements
	return string(marshalJSON(m))
}

// oneOrMany renders a list as IAM does: a string for one item, else an array.
func oneOrMany(items []string) json.RawMessage {
	if len(items) == 1 {
		return marshalJSON(items[0])
	}
	return marshalJSON(items)
}

// addPolicyStatement adds the statement labelled label; a label already in
// the policy fails with "Already exists.".
func addPolicyStatement(policy, queueARN, label string, accounts, actions []string) (string, *apiError) {
	doc, err := parsePolicy(policy, queueARN)
	if err != nil {
		return "", err
	}
	if doc.find(label) >= 0 {
		return "", errParam(label, "Label", "Already exists.")
	}
	principals := make([]string, len(accounts))
	for i, a := range accounts {
		principals[i] = "arn:aws:iam::" + a + ":root"
	}
	acts := make([]string, len(actions))
	for i, a := range actions {
		acts[i] = "SQS:" + strings.TrimPrefix(a, "SQS:")
	}
	doc.statements = append(doc.statements, map[string]json.RawMessage{
		"Sid":       marshalJSON(label),
		"Effect":    json.RawMessage(`"Allow"`),
		"Principal": marshalJSON(map[string]json.RawMessage{"AWS": oneOrMany(principals)}),
		"Action":    oneOrMany(acts),
		"Resource":  marshalJSON(queueARN),
	})
	return doc.String(), nil
}

// removePolicyStatement removes the statement labelled label; an unknown
// label fails with "can't find label.".
func removePolicyStatement(policy, label string) (string, *apiError) {
	doc, err := parsePolicy(policy, "")
	if err != nil || policy == "" {
		return "", errParam(label, "Label", "can't find label.")
	}
	i := doc.find(label)
	if i < 0 {
		return "", errParam(label, "Label", "can't find label.")
	}
	doc.statements = append(doc.statements[:i], doc.statements[i+1:]...)
	return doc.String(), nil
}
