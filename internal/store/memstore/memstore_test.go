package memstore_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/sluicemq/sluice/internal/store"
	"github.com/sluicemq/sluice/internal/store/memstore"
	"github.com/sluicemq/sluice/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memstore.New() })
}

func TestFail(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	s.Fail(syscall.EIO)
	var b store.Batch
	b.Set([]byte("a"), []byte("1"))
	_, err := s.Write(&b, true)
	if !errors.Is(err, store.ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Write after Fail: %v, want ErrFailed wrapping EIO", err)
	}
	if err := s.Sync(); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Sync after Fail: %v, want ErrFailed", err)
	}
}

func TestUnknownOpFailsStore(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	b := store.Batch{Ops: []store.Op{{Kind: 99, Key: []byte("a")}}}
	if _, err := s.Write(&b, false); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Write of unknown op: %v, want ErrFailed", err)
	}
	var ok store.Batch
	ok.Set([]byte("a"), []byte("1"))
	if _, err := s.Write(&ok, false); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Write after failure: %v, want ErrFailed", err)
	}
}
