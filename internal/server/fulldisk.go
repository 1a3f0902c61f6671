package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicemq/sluice/internal/store/pebblestore"
)

// A full disk, reached although the min_free_disk watermark refuses new
// messages before it (another process filled it, or it filled faster than
// one poll), fails the store on its next write: pebble keeps a failed
// WAL write for good and cannot reopen the WAL of a live database, so the
// server answers every write with an error and /health with 503 until it
// is restarted (docs/reliability.md, gap 1). A failed write(2), unlike a
// failed fsync, has lost nothing (pebblestore.Store.FailedOnFullDisk), so
// Supervise does that restart in place once space is back.

// fullDiskRetry bounds how long SuperviseInPlace tries, one attempt a second,
// to start the server again when that fails for another reason than a
// full disk (a port taken meanwhile), before it gives up and returns the
// error. A start that finds the disk full again is tried for as long as
// it takes.
const fullDiskRetry = time.Minute

// probeBytes is what the space probe writes: a WAL block's worth and more.
const probeBytes = 256 << 10

// Supervise creates a server from opts (New) and runs it (Run) until ctx
// ends, like New then Run, with one addition: when the server's disk
// store fails because a write found the disk full, and nothing else failed
// (pebblestore.Store.FailedOnFullDisk), it waits until space is back —
// free space above 125 % of min_free_disk (on the operating system's
// filesystem) and a probe file written and synced in the data directory —
// then shuts that server down gracefully (AMQP clients get 320
// CONNECTION_FORCED) and starts a new one on the same data directory and
// the same addresses, which recovers the store as a restart does. Until
// then the failed server keeps answering: writes with an error, /health
// and /ready with 503. Every other failure stays fail-stop. started, if
// not nil, is called with each server New returns, before it serves.
// Single node only: cluster.Supervise does the same for a cluster node.
func Supervise(ctx context.Context, opts Options, log *slog.Logger, started func(*Server)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var prev *Server
	open := func() (*Server, error) {
		if prev != nil {
			// A server started again serves where this one did, port 0 or not.
			opts = prev.pinnedAddrs(opts)
		}
		srv, err := New(opts, log, nil)
		if err == nil {
			prev = srv
		}
		return srv, err
	}
	return SuperviseInPlace(ctx, log, "the store failed on a full disk", "server", open, started)
}

// InPlace is what SuperviseInPlace runs: a single node's Server, or a
// cluster node.
type InPlace interface {
	// Run serves until ctx ends.
	Run(ctx context.Context) error
	// AwaitSpaceAfterFullDisk polls until ctx ends (false) or until a
	// store it runs on has failed because a write found the disk full,
	// nothing else failed, and space is back (true).
	AwaitSpaceAfterFullDisk(ctx context.Context) bool
}

// SuperviseInPlace opens a T (open) and runs it until ctx ends, and when
// its AwaitSpaceAfterFullDisk reports space back after a full disk,
// stops it (Run's context ends) and opens and runs a new one in its
// place; open is called for each, after the one before has stopped.
// failure ("the store failed on a full disk") and what ("server") word
// the log lines. It returns the first open's error, a later open's once
// it has failed for fullDiskRetry on anything but a full disk, Run's
// error when Run ends for another reason, or nil when ctx ends. started,
// if not nil, is called with each T open returns, before it runs.
func SuperviseInPlace[T InPlace](ctx context.Context, log *slog.Logger, failure, what string, open func() (T, error), started func(T)) error {
	cur, err := open()
	if err != nil {
		return err
	}
	for {
		if started != nil {
			started(cur)
		}
		runCtx, stopRun := context.WithCancel(ctx)
		done := make(chan error, 1)
		c := cur
		go func() { done <- c.Run(runCtx) }()
		back := make(chan struct{})
		go func() {
			if c.AwaitSpaceAfterFullDisk(runCtx) {
				close(back)
			}
		}()
		select {
		case err := <-done:
			stopRun()
			return err
		case <-back:
		}
		log.Warn("disk space is back after " + failure + ": restarting the " + what + " in place")
		stopRun()
		if err := <-done; err != nil {
			// Closing a store that failed may say so again; what it
			// holds is what a crash would have left, which opening
			// recovers.
			log.Warn("the "+what+" that failed on a full disk stopped with an error", "err", err)
		}
		var ok bool
		if cur, ok, err = reopen(ctx, log, open); err != nil || !ok {
			return err // nil: ctx ended
		}
		log.Info(what + " restarted in place after a full disk")
	}
}

// reopen is open, tried once a second while it fails: for as long as it
// fails on a full disk, for up to fullDiskRetry otherwise; ok is false
// when ctx ends first.
func reopen[T any](ctx context.Context, log *slog.Logger, open func() (T, error)) (_ T, ok bool, _ error) {
	deadline := time.Now().Add(fullDiskRetry)
	for {
		v, err := open()
		if err == nil {
			return v, true, nil
		}
		if !errors.Is(err, syscall.ENOSPC) && time.Now().After(deadline) {
			return v, false, fmt.Errorf("restarting after a full disk: %w", err)
		}
		log.Warn("restarting after a full disk failed; trying again", "err", err)
		select {
		case <-ctx.Done():
			return v, false, nil
		case <-time.After(time.Second):
		}
	}
}

// pinnedAddrs returns opts with the listen addresses replaced by the ones
// this server bound.
func (s *Server) pinnedAddrs(opts Options) Options {
	opts.SQSListen = s.SQSAddr()
	lns := s.amqpLns
	if opts.AMQPListen != "" && len(lns) > 0 {
		opts.AMQPListen, lns = lns[0].Addr().String(), lns[1:]
	}
	if opts.AMQPSListen != "" && len(lns) > 0 {
		opts.AMQPSListen = lns[0].Addr().String()
	}
	return opts
}

// AwaitSpaceAfterFullDisk implements InPlace: it polls every
// diskPollInterval for the store to have failed on a full disk
// (pebblestore.Store.FailedOnFullDisk) and for space to be back
// (spaceBack).
func (s *Server) AwaitSpaceAfterFullDisk(ctx context.Context) bool {
	fd, ok := s.st.(interface{ FailedOnFullDisk() bool })
	if !ok || s.opts.Store != "disk" {
		return false
	}
	return AwaitSpace(ctx, diskPollInterval, s.log,
		"the store failed on a full disk: writes are refused until space returns, then the server restarts in place",
		fd.FailedOnFullDisk, s.spaceBack)
}

// AwaitSpace polls, every interval until ctx ends (false), for failed to
// report a failure on a full disk and spaceBack to return nil; true once
// both hold. It logs msg at error once, when it first sees the failure.
func AwaitSpace(ctx context.Context, interval time.Duration, log *slog.Logger, msg string, failed func() bool, spaceBack func() error) bool {
	t := time.NewTicker(interval)
	defer t.Stop()
	logged := false
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if !failed() {
			continue
		}
		if !logged {
			logged = true
			log.Error(msg)
		}
		if err := spaceBack(); err != nil {
			log.Debug("no space yet", "err", err)
			continue
		}
		return true
	}
}

// spaceBack reports, as an error, why the data directory cannot take the
// store's writes yet (SpaceBack; free space is checked when the server
// watches the disk itself).
func (s *Server) spaceBack() error {
	var resumeAt uint64
	if s.diskWatched() {
		resumeAt = s.diskResumeAt()
	}
	return SpaceBack(s.opts.StoreFS, s.opts.DataDir, resumeAt, s.freeBytes)
}

// SpaceBack reports, as an error, why dir cannot take a store's writes
// again after the store failed on a full disk: free space (read with
// freeBytes) under resumeAt, when resumeAt is not 0, or a probe file
// that cannot be written and synced there (pebblestore.ProbeSpace,
// through fs; nil: the operating system's). nil when both pass.
func SpaceBack(fs vfs.FS, dir string, resumeAt uint64, freeBytes func(dir string) (uint64, error)) error {
	if resumeAt > 0 {
		free, err := freeBytes(dir)
		if err != nil {
			return err
		}
		if free < resumeAt {
			return fmt.Errorf("%d bytes free, want %d", free, resumeAt)
		}
	}
	if fs == nil {
		fs = vfs.Default
	}
	return pebblestore.ProbeSpace(fs, dir, probeBytes)
}
