package sqs

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/sluicemq/sluice/internal/engine"
)

// Routing: which queue a request is about, found without serving it, for a
// cluster router that sends each request to the node holding its queue.
//
// RouteOf reads a request through the very code the handler serves it with
// (call.parse for the protocol, action and fields; lookupAction and
// offQueuePath for the endpoint; call.decode with each action's own input
// shape; splitQueueURL, splitQueueARN, decodeTaskHandle and
// redrivePolicyMembers for the members naming queues), so it cannot read a
// different queue from the one the handler would act on. What it leaves out
// is what does not depend on the node: authorization (the SigV4 principal,
// its account and allow-list), the GET/POST rule, the account in a QueueUrl,
// queue path or ARN and the region in an ARN, and every check of the
// request's other members. The handler that serves the request answers those.

// Route is what a cluster router needs to know of a request: the queue it
// names, if any, and for CreateQueue the dead-letter target its
// RedrivePolicy names.
type Route struct {
	// Action is the SQS action: one of the actions the handler serves, or
	// "" when the request names none, names one the handler does not serve,
	// or cannot be read (a malformed Query string, a JSON request whose
	// X-Amz-Target is not "AmazonSQS.<Action>", a body over 5 MiB).
	Action string
	// Queue is the name of the queue the request is about, "" when it
	// names none (ListQueues, an unknown action, a malformed request or
	// member, a name that is not a valid queue name). It is always either
	// "" or a valid queue name (engine.ValidQueueName). For the move task
	// actions it is the source queue.
	Queue string
	// Create is true when Action is CreateQueue (Queue is then QueueName).
	Create bool
	// DeadLetterTarget is, for CreateQueue, the queue name in the
	// deadLetterTargetArn of its RedrivePolicy attribute, "" when none or
	// unparsable. Like Queue, it is "" or a valid queue name.
	DeadLetterTarget string
	// PlaceWith is, for CreateQueue, the value of its PlaceWithTag tag:
	// a queue the new one should live with (a cluster with shards puts
	// it on that queue's shard). Like Queue, it is "" or a valid queue
	// name.
	PlaceWith string
}

// PlaceWithTag is the queue tag whose value, on CreateQueue, names an
// existing queue the new queue is to live with in a cluster with several
// shards (a dead-letter queue created for a queue that exists, so that a
// RedrivePolicy can name it). It is an ordinary tag otherwise.
const PlaceWithTag = "sluice:place-with"

// RouteOf reports the queue request r names. body is r's whole body,
// already read by the caller (RouteOf does not read r.Body, nor a body
// recorded in r's context: pass the bytes the handler will serve). It never
// fails: a request it cannot parse gets Route{} (or just an Action), and
// the handler that serves it answers the error.
//
// The protocol, action and queue are identified exactly as the handler
// identifies them:
//
//   - AWS JSON 1.0 (X-Amz-Target "AmazonSQS.<Action>" with an
//     application/x-amz-json-1.x or application/json Content-Type; the body
//     is JSON) or else Query (Action and the other members in the URL query
//     and, for a POST with a form body, in the body).
//   - The queue is the QueueUrl member's last path segment, or, when the
//     request has no QueueUrl, the queue path /<account>/<queue> the request
//     was sent to (in both protocols). CreateQueue and GetQueueUrl name
//     their queue in QueueName; StartMessageMoveTask and
//     ListMessageMoveTasks in SourceArn (the ARN's last field);
//     CancelMessageMoveTask in its TaskHandle (the source ARN it encodes).
//   - A Query request to a queue path whose action is not a queue action
//     (other than GetQueueUrl) names no queue: the handler refuses it.
//   - A body that does not decode into the action's input names no queue.
//
// Accounts and regions are not checked: a request naming a queue of another
// account is routed by its name and refused by the handler. Neither is
// authorization (see the comment at the top of route.go).
//
// The strings of the result share no memory with body, which the caller
// may reuse.
func RouteOf(r *http.Request, body []byte) Route {
	if r == nil || r.URL == nil || len(body) > maxRequestBody {
		// The handler refuses a body over its cap before it looks at it.
		return Route{}
	}
	// No Handler: parse and decode read only the request.
	c := &call{ctx: r.Context(), req: r}
	c.pathAccount, c.pathQueue = splitQueuePath(r.URL.Path)
	if c.parse(r, body) != nil {
		return Route{}
	}
	_, queueAction, known := lookupAction(c.action)
	if !known {
		return Route{}
	}
	rt := Route{Action: c.action, Create: c.action == "CreateQueue"}
	if c.offQueuePath(queueAction) {
		return rt
	}
	rt.Queue, rt.DeadLetterTarget, rt.PlaceWith = c.routeQueue()
	return rt
}

// routeQueue decodes the request with its action's input shape, as the
// action does, and returns the queue the action resolves, with, for
// CreateQueue, its RedrivePolicy's dead-letter target and its PlaceWithTag
// tag. Each case mirrors the
// member its action hands to queueName (QueueUrl), arnQueue (SourceArn), or
// checks itself (QueueName, TaskHandle).
func (c *call) routeQueue() (queue, deadLetterTarget, placeWith string) {
	switch c.action {
	case "SendMessage":
		var in sendMessageInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "SendMessageBatch":
		var in sendMessageBatchInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "ReceiveMessage":
		var in receiveMessageInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "DeleteMessage":
		var in deleteMessageInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "DeleteMessageBatch":
		var in deleteBatchInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "ChangeMessageVisibility":
		var in changeVisibilityInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "ChangeMessageVisibilityBatch":
		var in changeVisibilityBatchInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "DeleteQueue", "PurgeQueue", "ListQueueTags":
		var in queueURLInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "GetQueueAttributes":
		var in getQueueAttributesInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "SetQueueAttributes":
		var in setQueueAttributesInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "ListDeadLetterSourceQueues":
		var in listDLQSourcesInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "TagQueue":
		var in tagQueueInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "UntagQueue":
		var in untagQueueInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "AddPermission":
		var in addPermissionInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "RemovePermission":
		var in removePermissionInput
		return c.routeURL(&in, &in.QueueUrl), "", ""
	case "CreateQueue":
		var in createQueueInput
		if c.decode(&in) != nil {
			return "", "", ""
		}
		return routable(in.QueueName), routeRedriveTarget(in.Attributes[attrRedrivePolicy]), routable(in.Tags[PlaceWithTag])
	case "GetQueueUrl":
		var in getQueueURLInput
		if c.decode(&in) != nil {
			return "", "", ""
		}
		return routable(in.QueueName), "", ""
	case "StartMessageMoveTask":
		var in startMoveTaskInput
		if c.decode(&in) != nil {
			return "", "", ""
		}
		return routeARN(in.SourceArn), "", ""
	case "ListMessageMoveTasks":
		var in listMoveTasksInput
		if c.decode(&in) != nil {
			return "", "", ""
		}
		return routeARN(in.SourceArn), "", ""
	case "CancelMessageMoveTask":
		var in cancelMoveTaskInput
		if c.decode(&in) != nil {
			return "", "", ""
		}
		if _, arn, ok := decodeTaskHandle(in.TaskHandle); ok {
			return routeARN(arn), "", ""
		}
		return "", "", ""
	}
	// ListQueues, and any action that names no queue.
	return "", "", ""
}

// routeURL decodes in and resolves *queueURL, a member of in, as queueName
// does: its last path segment, or the queue path when it is empty.
func (c *call) routeURL(in queryDecoder, queueURL *string) string {
	if c.decode(in) != nil {
		return ""
	}
	if *queueURL == "" {
		return routable(c.pathQueue)
	}
	_, name := splitQueueURL(*queueURL)
	return routable(name)
}

// routeARN is the queue name a queue ARN ends with, of any region and
// account.
func routeARN(arn string) string {
	_, _, name, ok := splitQueueARN(arn)
	if !ok {
		return ""
	}
	return routable(name)
}

// routeRedriveTarget is the queue a RedrivePolicy's deadLetterTargetArn
// names, read as parseRedrivePolicy reads it.
func routeRedriveTarget(policy string) string {
	if policy == "" {
		return ""
	}
	var arn string
	if json.Unmarshal(redrivePolicyMembers(policy)[redriveTargetKey], &arn) != nil {
		return ""
	}
	return routeARN(arn)
}

// routable is name if it is a valid queue name, else "". The result is a
// copy: decoded strings may point into the request body.
func routable(name string) string {
	if !engine.ValidQueueName(name) {
		return ""
	}
	return strings.Clone(name)
}
