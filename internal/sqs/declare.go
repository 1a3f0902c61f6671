package sqs

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/sluicemq/sluice/internal/engine"
)

// Declarations: queues named in the config file ([[queues]]) and in a
// definitions document (sluice definitions import) are made to exist
// through the same validation as CreateQueue and SetQueueAttributes, so a
// declared attribute means exactly what it means on the wire.

// DeclareQueue makes queue name exist with attrs (CreateQueue's attribute
// names and string values) and tags. A missing queue is created. An
// existing queue gets every named attribute that differs set, as
// SetQueueAttributes would, and the named tags added; attributes and tags
// not named are left alone, so declaring twice is a no-op. FifoQueue cannot
// change on an existing queue. Errors carry the SQS error code and message
// (a RedrivePolicy naming a queue that does not exist yet fails: declare
// the dead-letter queue first).
func (h *Handler) DeclareQueue(name string, attrs, tags map[string]string) (created bool, err error) {
	// An operator's declaration (config file, definitions import): no
	// SigV4 principal, so every queue is allowed.
	c := &call{h: h, proto: protoJSON, jsonOut: true, ctx: context.Background()}
	fifo := strings.HasSuffix(name, ".fifo")
	if v, ok := attrs[attrFifoQueue]; ok {
		b, ok := parseBool(v)
		if !ok {
			return false, errInvalidAttrValue(attrFifoQueue)
		}
		if (b == "true") != fifo {
			return false, newErr(kindInvalidParameter, msgFIFOQueueNameInvalid)
		}
	}
	if !engine.ValidQueueName(name) {
		return false, newErr(kindInvalidParameter, msgQueueNameInvalid)
	}
	info, gerr := h.eng.GetQueue(name)
	if gerr != nil {
		c.body = marshalJSON(createQueueInput{QueueName: name, Attributes: attrs, Tags: tags})
		if _, aerr := c.createQueue(); aerr != nil {
			return false, aerr
		}
		return true, nil
	}
	if info.Config.FIFO != fifo {
		return false, fmt.Errorf("sqs: queue %s exists with FifoQueue=%t; delete it to change the type", name, info.Config.FIFO)
	}
	have := h.configAttributes(&info.Config)
	changed := map[string]string{}
	for k, v := range attrs {
		if k == attrFifoQueue {
			continue
		}
		if have[k] != v {
			changed[k] = v
		}
	}
	if len(changed) > 0 {
		apply, aerr := c.parseAttributes(changed, name, fifo)
		if aerr != nil {
			return false, aerr
		}
		if uerr := h.eng.UpdateQueue(name, func(cfg *engine.QueueConfig) error { apply(cfg); return nil }); uerr != nil {
			return false, mapEngineErr(uerr, errDetail{queue: name})
		}
	}
	newTags := map[string]string{}
	for k, v := range tags {
		if info.Tags[k] != v {
			newTags[k] = v
		}
	}
	if len(newTags) > 0 {
		if terr := checkTags(newTags, false); terr != nil {
			return false, terr
		}
		if err := h.eng.TagQueue(name, newTags); err != nil {
			return false, mapEngineErr(err, errDetail{queue: name})
		}
	}
	return false, nil
}

// QueueDefinition returns what DeclareQueue needs to recreate queue name:
// its settable attributes (as GetQueueAttributes renders them, FIFO
// settings included) and its tags.
func (h *Handler) QueueDefinition(name string) (attrs, tags map[string]string, err error) {
	info, err := h.eng.GetQueue(name)
	if err != nil {
		return nil, nil, mapEngineErr(err, errDetail{queue: name})
	}
	attrs = h.configAttributes(&info.Config)
	return attrs, maps.Clone(info.Tags), nil
}

// QueueARN is the ARN of queue name in this handler's account and region
// (what a RedrivePolicy's deadLetterTargetArn names).
func (h *Handler) QueueARN(name string) string { return h.queueARN(name) }
