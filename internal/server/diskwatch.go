package server

import (
	"context"
	"syscall"
	"time"
)

// diskPollInterval is how often the free-space watch polls: often enough
// that a fast producer cannot fill the margin between two polls.
const diskPollInterval = time.Second

// freeBytes reports the space available to unprivileged writers on the
// filesystem holding dir.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// watchDisk polls the data directory's free space and applies
// back-pressure: below MinFreeDisk the engine refuses new messages
// (ErrDiskFull: SQS producers get a clear, retryable error; AMQP publishers
// are blocked and told with connection.blocked "low on disk", RabbitMQ's
// disk alarm), and it accepts them again once free space is back above
// 125% of the watermark. Pebble cannot
// recover from a failed write without a restart, so the point is never to
// let it reach ENOSPC; reads, deletes and acks, which free space, go on.
func (s *Server) watchDisk(ctx context.Context, interval time.Duration) {
	if s.opts.Store != "disk" || s.opts.StoreFS != nil || s.opts.MinFreeDisk <= 0 {
		return
	}
	low := uint64(s.opts.MinFreeDisk)
	high := low + low/4
	refusing := false
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		free, err := s.freeBytes(s.opts.DataDir)
		switch {
		case err != nil:
			s.log.Warn("cannot read free disk space", "dir", s.opts.DataDir, "err", err)
		case !refusing && free < low:
			refusing = true
			s.setAlarm(alarmDisk, true)
			s.log.Error("disk nearly full: refusing new messages until space returns", "free_bytes", free, "min_free_disk", low)
		case refusing && free >= high:
			refusing = false
			s.setAlarm(alarmDisk, false)
			s.log.Info("disk space back: accepting new messages", "free_bytes", free)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
