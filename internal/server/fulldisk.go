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

// fullDiskRetry bounds how long Supervise tries, one attempt a second,
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
	srv, err := New(opts, log, nil)
	if err != nil {
		return err
	}
	for {
		// A server started again serves where this one does, port 0 or not.
		opts = srv.pinnedAddrs(opts)
		if started != nil {
			started(srv)
		}
		runCtx, stopRun := context.WithCancel(ctx)
		done := make(chan error, 1)
		s := srv
		go func() { done <- s.Run(runCtx) }()
		back := make(chan struct{})
		go func() {
			if s.awaitSpaceAfterFullDisk(runCtx) {
				close(back)
			}
		}()
		select {
		case err := <-done:
			stopRun()
			return err
		case <-back:
		}
		log.Warn("disk space is back after the store failed on a full disk: restarting the server in place")
		stopRun()
		if err := <-done; err != nil {
			return err
		}
		if srv, err = reopen(ctx, opts, log); err != nil {
			return err
		}
		if srv == nil {
			return nil // ctx ended
		}
		log.Info("server restarted in place after a full disk")
	}
}

// reopen is New, tried once a second while it fails: for as long as it
// fails on a full disk, for up to fullDiskRetry otherwise; nil, nil when
// ctx ends first.
func reopen(ctx context.Context, opts Options, log *slog.Logger) (*Server, error) {
	deadline := time.Now().Add(fullDiskRetry)
	for {
		srv, err := New(opts, log, nil)
		if err == nil {
			return srv, nil
		}
		if !errors.Is(err, syscall.ENOSPC) && time.Now().After(deadline) {
			return nil, fmt.Errorf("restarting after a full disk: %w", err)
		}
		log.Warn("restarting after a full disk failed; trying again", "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
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

// awaitSpaceAfterFullDisk polls, every diskPollInterval until ctx ends,
// for the store to have failed on a full disk and space to be back
// (spaceBack); true once both hold.
func (s *Server) awaitSpaceAfterFullDisk(ctx context.Context) bool {
	fd, ok := s.st.(interface{ FailedOnFullDisk() bool })
	if !ok || s.opts.Store != "disk" {
		return false
	}
	t := time.NewTicker(diskPollInterval)
	defer t.Stop()
	logged := false
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if !fd.FailedOnFullDisk() {
			continue
		}
		if !logged {
			logged = true
			s.log.Error("the store failed on a full disk: writes are refused until space returns, then the server restarts in place")
		}
		if err := s.spaceBack(); err != nil {
			s.log.Debug("no space yet", "err", err)
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
