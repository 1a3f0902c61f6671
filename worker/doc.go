// Package worker runs message consumers that handle poison messages
// correctly by default: failures are classified, retried with capped
// full-jitter backoff within a retry budget, dead-lettered with their
// context when retrying cannot help, and a circuit breaker pauses
// receiving while a downstream is down. Leases are extended while a
// handler runs, shutdown finishes or hands back every message, and an
// optional Deduper makes redelivered and redriven messages run once.
//
// The transport is a Source. SQSSource speaks the SQS API (Amazon SQS or
// Sluice); against Sluice it uses the failure-report extension
// (POST /sluice/v1/failures) so that a terminal failure is dead-lettered
// at once with its error class, message, trace and consumer version, and
// falls back to plain SQS behaviour where the extension is absent.
//
// # What happens to a message
//
//   - The handler returns nil: the message is deleted (acked).
//   - It returns an error marked Terminal, or one that classifies as
//     terminal: the message is dead-lettered now, with its context.
//   - It returns a transient error: the message comes back after a
//     backoff (the broker's SluiceRetryPolicy, else uniform(0,
//     min(Cap, Base·2^(attempt-1)))), until the queue's maxReceiveCount
//     dead-letters it. Over the retry budget it waits out a whole
//     visibility timeout instead. It is never dropped.
//   - It panics: the panic is recovered; by default it is terminal
//     (Options.PanicIsTerminal) with the goroutine stack as trace.
//   - The worker shuts down while it runs: it may finish within
//     Options.ShutdownTimeout; then its context is cancelled and the
//     message is released for immediate redelivery.
//
// Unclassified errors are transient by default (Options.UnknownIsTransient);
// the field's documentation explains the trade-off.
//
// docs/worker.md walks through the poison-message story end to end.
//
// # Caveats
//
//   - Delivery is at least once. Without a Deduper a handler can run more
//     than once for the same message; with one, see Deduper for the exact
//     guarantee.
//   - On plain SQS the failure context is only logged, and a terminal
//     failure reaches the DLQ after the remaining receives (fast, without
//     re-running the handler in this process) rather than at once.
//   - Lease extension uses ChangeMessageVisibility at half the visibility
//     timeout; a handler blocked longer than a whole timeout by a paused
//     process (GC stop, SIGSTOP) can still lose its lease.
package worker
