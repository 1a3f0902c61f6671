package server

import (
	"context"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// diskPollInterval is how often the free-space watch polls: often enough
// that a fast producer cannot fill the margin between two polls.
const diskPollInterval = time.Second

// FreeBytes reports the space available to unprivileged writers on the
// filesystem holding dir. A cluster node watches its data directory with
// it (Options.ExternalDiskWatch).
func FreeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// RestartReserve is the free space a restart of the disk store may need:
// at open, pebble replays the write-ahead log that was not yet flushed into
// sorted tables and writes them out, which is at most
// DefaultMemTableStopWritesThreshold memtables, plus a new WAL and
// MANIFEST. It is sized for the 64 MiB memtables releases used before
// 2026-12-02 (256 MiB), so a store last written by one of them can still
// restart at the watermark; today's memtables of at most
// DefaultMemTableSize need a quarter of it. A min_free_disk of at least
// this much keeps a restart at the watermark possible, since nothing the
// broker still accepts at the watermark can use up that reserve.
const RestartReserve = pebblestore.DefaultMemTableStopWritesThreshold * (64 << 20)

// checkDisk reads the data directory's free space and sets or lifts the
// engine's admission: below MinFreeDisk new messages are refused
// (ErrDiskFull: SQS producers get a clear, retryable error; AMQP
// publishers are blocked with connection.blocked "low on disk", RabbitMQ's
// disk alarm); they are accepted
// again once free space is back above 125% of the watermark. It returns
// whether the broker now refuses. New calls it once before the broker
// accepts anything, so a broker restarted at the watermark never accepts a
// message it should refuse; watchDisk then calls it every interval.
func (s *Server) checkDisk(refusing bool) bool {
	low, high := uint64(s.opts.MinFreeDisk), s.diskResumeAt()
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
	return refusing
}

// diskResumeAt is the free space at which a disk that went below
// MinFreeDisk counts as having room again: 125 % of it, so that the
// refusal does not flap around the watermark.
func (s *Server) diskResumeAt() uint64 {
	low := uint64(s.opts.MinFreeDisk)
	return low + low/4
}

// diskWatched reports whether the server's own free-space watch applies
// (not when a cluster node watches for it: Options.ExternalDiskWatch).
func (s *Server) diskWatched() bool {
	return s.opts.Store == "disk" && s.opts.StoreFS == nil && s.opts.MinFreeDisk > 0 && !s.opts.ExternalDiskWatch
}

// SetDiskAlarm raises or clears the disk alarm on behalf of a watch that
// runs outside the server (Options.ExternalDiskWatch: a cluster leader's
// node, which also counts its followers' disks). Raised, it refuses new
// messages exactly as the server's own watch does below min_free_disk
// (engine.ErrDiskFull; AMQP publishers blocked with "low on disk");
// receives, deletes and acks go on. Calling it again with the same state
// does nothing.
func (s *Server) SetDiskAlarm(on bool) { s.setAlarm(alarmDisk, on) }

// watchDisk polls the data directory's free space (checkDisk) until ctx
// ends. Pebble cannot recover from a failed write without a restart, so the
// point is never to let it reach ENOSPC; reads, deletes and acks, which
// free space, go on.
func (s *Server) watchDisk(ctx context.Context, interval time.Duration) {
	if !s.diskWatched() {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.diskRefusing = s.checkDisk(s.diskRefusing)
	}
}
