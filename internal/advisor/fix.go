package advisor

import "fmt"

// fixFor names the change that resolves a yellow or red finding of check
// on queue q: an attribute and the command that sets it, or the sluice
// command to run. The SQS commands use the AWS CLI against the default
// endpoint; the same attributes can be declared in the config file's
// [[queues]] (docs/sluice.example.toml).
func fixFor(check, q string) string {
	url := fmt.Sprintf("$(aws --endpoint-url http://127.0.0.1:9324 sqs get-queue-url --queue-name %s --output text)", q)
	set := func(attrs string) string {
		return fmt.Sprintf("aws --endpoint-url http://127.0.0.1:9324 sqs set-queue-attributes --queue-url %s --attributes '%s'", url, attrs)
	}
	switch check {
	case CheckVisibility:
		return "set VisibilityTimeout to about 6× the p99 processing time: " + set(`{"VisibilityTimeout":"<seconds>"}`)
	case CheckMaxReceiveCount:
		return fmt.Sprintf("set maxReceiveCount between %d and %d in the RedrivePolicy: %s", MinMaxReceiveCount, MaxMaxReceiveCount,
			set(fmt.Sprintf(`{"RedrivePolicy":"{\"deadLetterTargetArn\":\"<dlq arn>\",\"maxReceiveCount\":\"%d\"}"}`, 5)))
	case CheckDLQ:
		return fmt.Sprintf("create a dead-letter queue and attach it: aws --endpoint-url http://127.0.0.1:9324 sqs create-queue --queue-name %s-dlq; then %s (or dead_letter_queue/max_receive_count in [[queues]]; for AMQP, x-dead-letter-exchange)",
			q, set(fmt.Sprintf(`{"RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:<region>:<account>:%s-dlq\",\"maxReceiveCount\":\"5\"}"}`, q)))
	case CheckDLQConsumers:
		return fmt.Sprintf("stop the consumer attached to %s; triage with `sluice dlq peek %s` and return fixed messages with `sluice dlq redrive %s`", q, q, q)
	case CheckDLQRetention:
		return "keep dead letters longer than their sources (SQS allows 14 days, SluiceRetentionPeriod up to 30): " + set(`{"MessageRetentionPeriod":"1209600"}`)
	case CheckDLQAlert:
		return "enable the dlq_growth alert ([alerts] in the config) or load docs/prometheus/sluice-alerts.yml into Prometheus"
	case CheckDLQOwner:
		return fmt.Sprintf("tag the queue with its owning team: aws --endpoint-url http://127.0.0.1:9324 sqs tag-queue --queue-url %s --tags %s=<team>", url, OwnerTag)
	case CheckPrefetch:
		return fmt.Sprintf("set the consumer's prefetch to at most %d (AMQP basic.qos prefetch_count; SQS MaxNumberOfMessages ≤ 10 already is)", MaxPrefetch)
	case CheckFIFOGroups:
		return "send with a MessageGroupId per ordering key (an order id, a customer id) instead of one constant group"
	case CheckDLQShared:
		return fmt.Sprintf("give each consumer group its own dead-letter queue (`sluice queues create <queue>` makes one), or tag the sources that belong together with the same %s", GroupTag)
	case CheckFIFODLQOrder:
		return fmt.Sprintf("if the workload tolerates a dead letter being overtaken by the rest of its group, acknowledge it: aws --endpoint-url http://127.0.0.1:9324 sqs tag-queue --queue-url %s --tags %s=true; otherwise drop the dead-letter policy and stop on failure", url, FIFODLQAckTag)
	case CheckRetention:
		return fmt.Sprintf("drain or redrive the oldest messages now (`sluice dlq peek %s`, `sluice dlq redrive %s`), or raise MessageRetentionPeriod: %s", q, q, set(`{"MessageRetentionPeriod":"1209600"}`))
	}
	return ""
}
