package sqs

import (
	"encoding/base64"
	"errors"
	"sort"
	"strings"

	"github.com/sluicemq/sluice/internal/engine"
)

// Queue actions: CreateQueue, DeleteQueue, GetQueueUrl, Get/SetQueueAttributes,
// ListQueues, PurgeQueue, ListDeadLetterSourceQueues, Tag/Untag/ListQueueTags.

func (c *call) createQueue() (output, *apiError) {
	var in createQueueInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name := in.QueueName
	if name == "" {
		return nil, errMissing("QueueName")
	}
	fifo := false
	if v, ok := in.Attributes[attrFifoQueue]; ok {
		b, ok := parseBool(v)
		if !ok {
			return nil, errInvalidAttrValue(attrFifoQueue)
		}
		fifo = b == "true"
	}
	if !engine.ValidQueueName(name) {
		if fifo {
			return nil, newErr(kindInvalidParameter, msgFIFOQueueNameInvalid)
		}
		return nil, newErr(kindInvalidParameter, msgQueueNameInvalid)
	}
	hasSuffix := strings.HasSuffix(name, ".fifo")
	if fifo && !hasSuffix {
		return nil, newErr(kindInvalidParameter, msgFIFOQueueNameInvalid)
	}
	if !fifo && hasSuffix {
		return nil, newErr(kindInvalidParameter, msgQueueNameInvalid)
	}
	if err := c.authorize(name); err != nil {
		return nil, err
	}
	apply, err := c.parseAttributes(in.Attributes, name, fifo)
	if err != nil {
		return nil, err
	}
	if err := checkTags(in.Tags, false); err != nil {
		return nil, err
	}

	cfg := engine.DefaultQueueConfig()
	cfg.FIFO = fifo
	if fifo {
		cfg.FifoThroughputLimit = defaultFifoThroughputLimit
	}
	cfg.Extra = map[string]string{attrSqsManagedSseEnabled: "true"}
	apply(&cfg)

	info, created, cerr := c.h.eng.CreateQueue(name, cfg, in.Tags)
	if cerr != nil {
		return nil, mapEngineErr(cerr, errDetail{queue: name})
	}
	if created {
		c.h.warnConfig(name)
	}
	if !created {
		// Idempotency: compare only the attributes the request names with
		// the queue's current values, after applying them to a copy so both
		// sides are rendered the same way.
		desired := cloneConfig(info.Config)
		apply(&desired)
		want, have := c.h.configAttributes(&desired), c.h.configAttributes(&info.Config)
		for _, k := range sortedKeys(in.Attributes) {
			if want[k] != have[k] {
				return nil, errText(kindQueueAlreadyExists, msgQueueExistsDifferentValues+k)
			}
		}
	}
	return &queueURLOutput{QueueUrl: c.queueURL(name)}, nil
}

func (c *call) deleteQueue() (output, *apiError) {
	return c.onQueue(func(name string) error {
		err := c.h.eng.DeleteQueue(name)
		if err == nil {
			c.h.flow.trends.Delete(name) // a queue made again starts afresh
		}
		return err
	})
}

// onQueue runs an engine operation on the queue a QueueUrl-only request
// names (DeleteQueue, PurgeQueue); they have no output.
func (c *call) onQueue(op func(name string) error) (output, *apiError) {
	var in queueURLInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if oerr := op(name); oerr != nil {
		return nil, mapEngineErr(oerr, errDetail{queue: name})
	}
	return nil, nil
}

func (c *call) getQueueURL() (output, *apiError) {
	var in getQueueURLInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	if in.QueueName == "" {
		return nil, errMissing("QueueName")
	}
	if in.QueueOwnerAWSAccountId != "" && in.QueueOwnerAWSAccountId != c.h.account {
		return nil, errQueueDoesNotExist()
	}
	if !engine.ValidQueueName(in.QueueName) {
		return nil, errQueueDoesNotExist()
	}
	if err := c.authorize(in.QueueName); err != nil {
		return nil, err
	}
	if _, gerr := c.h.eng.GetQueue(in.QueueName); gerr != nil {
		return nil, mapEngineErr(gerr, errDetail{queue: in.QueueName})
	}
	return &queueURLOutput{QueueUrl: c.queueURL(in.QueueName)}, nil
}

func (c *call) getQueueAttributes() (output, *apiError) {
	var in getQueueAttributesInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	for _, n := range in.AttributeNames {
		if !readableAttribute(n) {
			return nil, errUnknownAttribute(n)
		}
	}
	q, err := c.getQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	all := c.h.queueAttributes(&q)
	out := &attributesOutput{}
	for _, n := range in.AttributeNames {
		if n == attrAll {
			out.Attributes = all
			break
		}
		if v, ok := all[n]; ok {
			if out.Attributes == nil {
				out.Attributes = map[string]string{}
			}
			out.Attributes[n] = v
		}
	}
	return out, nil
}

func (c *call) setQueueAttributes() (output, *apiError) {
	var in setQueueAttributesInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	q, err := c.getQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	apply, err := c.parseAttributes(in.Attributes, q.Name, q.Config.FIFO)
	if err != nil {
		return nil, err
	}
	if len(in.Attributes) == 0 {
		return nil, nil
	}
	uerr := c.h.eng.UpdateQueue(q.Name, func(cfg *engine.QueueConfig) error {
		apply(cfg)
		return nil
	})
	if uerr != nil {
		return nil, mapEngineErr(uerr, errDetail{queue: q.Name})
	}
	if _, ok := in.Attributes[attrRedrivePolicy]; ok {
		c.h.warnConfig(q.Name)
	}
	return nil, nil
}

// page returns one page of names (sorted) after the NextToken position.
// Without MaxResults it returns up to 1000 names and no token. The token is
// the last name returned, base64url-encoded.
func page(names []string, maxResults optInt, token string) (out []string, next string, err *apiError) {
	if err := checkRange(maxResults, "MaxResults", 1, 1000, "MaxResults must be an integer between 1 and 1000."); err != nil {
		return nil, "", err
	}
	if token != "" {
		raw, derr := base64.RawURLEncoding.DecodeString(token)
		if derr != nil {
			return nil, "", errParam(token, "NextToken", "Invalid NextToken value.")
		}
		after := string(raw)
		i := sort.SearchStrings(names, after)
		if i < len(names) && names[i] == after {
			i++
		}
		names = names[i:]
	}
	limit := 1000
	if maxResults.Set {
		limit = int(maxResults.V)
	}
	if len(names) > limit {
		names = names[:limit]
		if maxResults.Set {
			next = base64.RawURLEncoding.EncodeToString([]byte(names[len(names)-1]))
		}
	}
	return names, next, nil
}

func (c *call) listQueues() (output, *apiError) {
	var in listQueuesInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	names := c.h.eng.ListQueues(in.QueueNamePrefix)
	sort.Strings(names)
	names, next, err := page(names, in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	out := &listQueuesOutput{NextToken: next}
	for _, n := range names {
		out.QueueUrls = append(out.QueueUrls, c.queueURL(n))
	}
	return out, nil
}

func (c *call) purgeQueue() (output, *apiError) { return c.onQueue(c.h.eng.PurgeQueue) }

func (c *call) listDeadLetterSourceQueues() (output, *apiError) {
	var in listDLQSourcesInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	names, lerr := c.h.eng.DeadLetterSources(name)
	if lerr != nil {
		return nil, mapEngineErr(lerr, errDetail{queue: name})
	}
	sort.Strings(names)
	names, next, err := page(names, in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	out := &listDLQSourcesOutput{QueueUrls: []string{}, NextToken: next}
	for _, n := range names {
		out.QueueUrls = append(out.QueueUrls, c.queueURL(n))
	}
	return out, nil
}

// checkTags validates tags: keys 1–128 characters, values at most 256, at
// most MaxTags in one request, no "aws:" prefix. required makes an empty set
// a MissingParameter error (TagQueue).
func checkTags(tags map[string]string, required bool) *apiError {
	if len(tags) == 0 {
		if required {
			return errMissing("Tags")
		}
		return nil
	}
	if len(tags) > engine.MaxTags {
		return newErr(kindInvalidParameter, "Too many tags added for queue. A queue can have at most %d tags.", engine.MaxTags)
	}
	for _, k := range sortedKeys(tags) {
		if k == "" || len(k) > 128 {
			return errParam(k, "TagKey", "Tag keys must be between 1 and 128 characters in length.")
		}
		if strings.HasPrefix(strings.ToLower(k), "aws:") {
			return errParam(k, "TagKey", "Tag keys must not start with the reserved prefix aws:.")
		}
		if len(tags[k]) > 256 {
			return errParam(tags[k], "TagValue", "Tag values may only be up to 256 characters in length.")
		}
	}
	return nil
}

func (c *call) tagQueue() (output, *apiError) {
	var in tagQueueInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := checkTags(in.Tags, true); err != nil {
		return nil, err
	}
	if terr := c.h.eng.TagQueue(name, in.Tags); terr != nil {
		return nil, mapEngineErr(terr, errDetail{queue: name})
	}
	return nil, nil
}

func (c *call) untagQueue() (output, *apiError) {
	var in untagQueueInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if len(in.TagKeys) == 0 {
		return nil, errMissing("TagKeys")
	}
	if terr := c.h.eng.UntagQueue(name, in.TagKeys); terr != nil {
		return nil, mapEngineErr(terr, errDetail{queue: name})
	}
	return nil, nil
}

func (c *call) listQueueTags() (output, *apiError) {
	var in queueURLInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	q, err := c.getQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	out := &listTagsOutput{}
	if len(q.Tags) > 0 {
		out.Tags = q.Tags
	}
	return out, nil
}

func (c *call) addPermission() (output, *apiError) {
	var in addPermissionInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if err := checkPermission(&in); err != nil {
		return nil, err
	}
	arn := c.h.queueARN(name)
	return nil, c.editPolicy(name, func(policy string) (string, *apiError) {
		return addPolicyStatement(policy, arn, in.Label, in.AWSAccountIds, in.Actions)
	})
}

func (c *call) removePermission() (output, *apiError) {
	var in removePermissionInput
	if err := c.decode(&in); err != nil {
		return nil, err
	}
	name, err := c.queueName(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if in.Label == "" {
		return nil, errMissing("Label")
	}
	return nil, c.editPolicy(name, func(policy string) (string, *apiError) {
		return removePolicyStatement(policy, in.Label)
	})
}

// editPolicy changes the queue's Policy attribute atomically.
func (c *call) editPolicy(name string, edit func(string) (string, *apiError)) *apiError {
	uerr := c.h.eng.UpdateQueue(name, func(cfg *engine.QueueConfig) error {
		policy, err := edit(cfg.Extra[attrPolicy])
		if err != nil {
			return err
		}
		setExtra(attrPolicy, policy)(cfg)
		return nil
	})
	if uerr != nil {
		var ae *apiError
		if errors.As(uerr, &ae) {
			return ae
		}
		return mapEngineErr(uerr, errDetail{queue: name})
	}
	return nil
}
