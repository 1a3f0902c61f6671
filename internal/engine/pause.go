package engine

// SetPaused holds (paused) or resumes delivery from the queue (DLQ-41).
// While paused, Receive returns no messages (a long poll waits out its
// time) and AMQP consumers get none; messages stay visible and counted,
// sends, deletes, visibility changes, dead-lettering and redrives into the
// queue go on. Leases already given are not affected. The state is part
// of the queue's settings: durable when SetPaused returns and kept across
// restarts. Resuming wakes waiting receives at once.
func (e *Engine) SetPaused(queue string, paused bool) error {
	err := e.updateQueue(queue, func(cfg *QueueConfig) error {
		cfg.Paused = paused
		return nil
	})
	if err != nil || paused {
		return err
	}
	q, err := e.lockQueue(queue)
	if err != nil {
		return err
	}
	q.wakeLocked()
	e.unlockAndInsertCopies(q)
	e.log.Info("queue delivery resumed", "queue", queue)
	return nil
}
