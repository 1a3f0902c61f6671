package dedup

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/worker"
)

// conformance runs the Deduper contract against d; advance moves its
// clock.
func conformance(t *testing.T, d worker.Deduper, advance func(time.Duration), ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	if seen, err := d.Seen(ctx, "a"); err != nil || seen {
		t.Fatalf("fresh key: seen=%v err=%v", seen, err)
	}
	if err := d.Mark(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if seen, err := d.Seen(ctx, "a"); err != nil || !seen {
		t.Fatalf("marked key: seen=%v err=%v", seen, err)
	}
	if seen, _ := d.Seen(ctx, "b"); seen {
		t.Fatal("other key seen")
	}
	advance(ttl / 2)
	if err := d.Mark(ctx, "a"); err != nil { // marking again renews
		t.Fatal(err)
	}
	advance(ttl/2 + time.Second)
	if seen, _ := d.Seen(ctx, "a"); !seen {
		t.Fatal("renewed mark expired early")
	}
	advance(ttl)
	if seen, _ := d.Seen(ctx, "a"); seen {
		t.Fatal("mark outlived its TTL")
	}
}

func TestMemory(t *testing.T) {
	now := time.Unix(1000, 0)
	d := NewMemory(time.Minute)
	d.now = func() time.Time { return now }
	conformance(t, d, func(dt time.Duration) { now = now.Add(dt) }, time.Minute)

	// Expired marks are swept.
	for i := range 3000 {
		d.Mark(context.Background(), strconv.Itoa(i))
	}
	now = now.Add(2 * time.Minute)
	for i := range 1100 {
		d.Mark(context.Background(), "new"+strconv.Itoa(i))
	}
	if d.Len() > 1200 {
		t.Errorf("%d marks held after the old ones expired", d.Len())
	}
}

func TestSQL(t *testing.T) {
	for _, ph := range []Placeholder{Question, Dollar} {
		t.Run(strconv.Itoa(int(ph)), func(t *testing.T) {
			fake := newFakeDB(ph)
			db := sql.OpenDB(fake)
			defer db.Close()
			d, err := NewSQL(db, SQLOptions{Table: "dedup_marks", Placeholder: ph, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			d.now = func() time.Time { return now }
			ctx := context.Background()
			if err := d.CreateTable(ctx); err != nil {
				t.Fatal(err)
			}
			if err := d.CreateTable(ctx); err != nil { // idempotent
				t.Fatal(err)
			}
			conformance(t, d, func(dt time.Duration) { now = now.Add(dt) }, time.Minute)

			// Another worker inserts the key between our UPDATE and INSERT.
			fake.beforeInsert = func() { fake.rows["raced"] = 1 }
			if err := d.Mark(ctx, "raced"); err != nil {
				t.Fatalf("lost insert race: %v", err)
			}
			fake.beforeInsert = nil
			if seen, _ := d.Seen(ctx, "raced"); !seen {
				t.Fatal("raced key not seen")
			}

			// Purge deletes only expired marks.
			d.Mark(ctx, "fresh")
			now = now.Add(30 * time.Second)
			d.Mark(ctx, "fresher")
			now = now.Add(45 * time.Second)
			n, err := d.Purge(ctx)
			if err != nil || n != 3 { // a, raced, fresh
				t.Fatalf("purged %d, err %v", n, err)
			}
			if seen, _ := d.Seen(ctx, "fresher"); !seen {
				t.Fatal("purge removed a live mark")
			}

			// Database errors surface (the worker then retries the message).
			fake.fail = errors.New("connection refused")
			if _, err := d.Seen(ctx, "x"); err == nil {
				t.Fatal("Seen hid a database error")
			}
			if err := d.Mark(ctx, "x"); err == nil {
				t.Fatal("Mark hid a database error")
			}
		})
	}
}

func TestSQLOptions(t *testing.T) {
	db := sql.OpenDB(newFakeDB(Question))
	defer db.Close()
	for _, bad := range []SQLOptions{{Table: "x; DROP TABLE y"}, {Table: "a b"}, {TTL: time.Millisecond}, {Placeholder: 7}} {
		if _, err := NewSQL(db, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	d, err := NewSQL(db, SQLOptions{Table: "app.dedup"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Seen(context.Background(), string(make([]byte, 256))); err == nil {
		t.Error("over-long key accepted")
	}
}

// fakeDB is a database/sql driver that understands exactly the statements
// SQL issues, with the placeholder style given, over a map with a primary
// key. It checks the SQL text and the arguments; it is no substitute for a
// real database's parser. See docs/worker.md for why the tests do not use
// one.
type fakeDB struct {
	ph           Placeholder
	mu           sync.Mutex
	table        bool
	index        bool
	rows         map[string]int64
	fail         error
	beforeInsert func()
}

func newFakeDB(ph Placeholder) *fakeDB { return &fakeDB{ph: ph, rows: map[string]int64{}} }

func (f *fakeDB) Connect(context.Context) (driver.Conn, error) { return &fakeConn{f}, nil }
func (f *fakeDB) Driver() driver.Driver                        { return fakeDriver{f} }

type fakeDriver struct{ f *fakeDB }

func (d fakeDriver) Open(string) (driver.Conn, error) { return &fakeConn{d.f}, nil }

type fakeConn struct{ f *fakeDB }

func (c *fakeConn) Prepare(q string) (driver.Stmt, error) { return &fakeStmt{c.f, q}, nil }
func (c *fakeConn) Close() error                          { return nil }
func (c *fakeConn) Begin() (driver.Tx, error)             { return nil, errors.New("fake: no transactions") }

type fakeStmt struct {
	f *fakeDB
	q string
}

func (s *fakeStmt) Close() error  { return nil }
func (s *fakeStmt) NumInput() int { return -1 }

var (
	reCreate = regexp.MustCompile(`^CREATE TABLE IF NOT EXISTS (\w+) \(message_key VARCHAR\(255\) NOT NULL PRIMARY KEY, expires_at BIGINT NOT NULL\)$`)
	reIndex  = regexp.MustCompile(`^CREATE INDEX (\w+)_expires_at ON (\w+) \(expires_at\)$`)
	reSelect = regexp.MustCompile(`^SELECT expires_at FROM (\w+) WHERE message_key = (\?|\$1)$`)
	reUpdate = regexp.MustCompile(`^UPDATE (\w+) SET expires_at = (\?|\$1) WHERE message_key = (\?|\$2)$`)
	reInsert = regexp.MustCompile(`^INSERT INTO (\w+) \(message_key, expires_at\) VALUES \((\?|\$1), (\?|\$2)\)$`)
	reDelete = regexp.MustCompile(`^DELETE FROM (\w+) WHERE expires_at <= (\?|\$1)$`)
)

// check verifies the placeholders match the style and the argument count.
func (s *fakeStmt) check(m []string, args []driver.Value, n int) error {
	if len(args) != n {
		return fmt.Errorf("fake: %d args for %q", len(args), s.q)
	}
	for _, p := range m[2:] {
		if (p == "?") != (s.f.ph == Question) {
			return fmt.Errorf("fake: placeholder %s in %q", p, s.q)
		}
	}
	if !s.f.table {
		return errors.New("fake: no such table")
	}
	return nil
}

func (s *fakeStmt) Exec(args []driver.Value) (driver.Result, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	if reCreate.MatchString(s.q) {
		f.table = true
		return driver.RowsAffected(0), nil
	}
	if reIndex.MatchString(s.q) {
		if f.index {
			return nil, errors.New("fake: index already exists")
		}
		f.index = true
		return driver.RowsAffected(0), nil
	}
	if m := reUpdate.FindStringSubmatch(s.q); m != nil {
		if err := s.check(m, args, 2); err != nil {
			return nil, err
		}
		key := args[1].(string)
		if _, ok := f.rows[key]; !ok {
			return driver.RowsAffected(0), nil
		}
		f.rows[key] = args[0].(int64)
		return driver.RowsAffected(1), nil
	}
	if m := reInsert.FindStringSubmatch(s.q); m != nil {
		if err := s.check(m, args, 2); err != nil {
			return nil, err
		}
		if f.beforeInsert != nil {
			f.beforeInsert()
		}
		key := args[0].(string)
		if _, ok := f.rows[key]; ok {
			return nil, errors.New("fake: UNIQUE constraint failed: message_key")
		}
		f.rows[key] = args[1].(int64)
		return driver.RowsAffected(1), nil
	}
	if m := reDelete.FindStringSubmatch(s.q); m != nil {
		if err := s.check(m, args, 1); err != nil {
			return nil, err
		}
		n := 0
		for k, exp := range f.rows {
			if exp <= args[0].(int64) {
				delete(f.rows, k)
				n++
			}
		}
		return driver.RowsAffected(n), nil
	}
	return nil, fmt.Errorf("fake: unexpected statement %q", s.q)
}

func (s *fakeStmt) Query(args []driver.Value) (driver.Rows, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	m := reSelect.FindStringSubmatch(s.q)
	if m == nil {
		return nil, fmt.Errorf("fake: unexpected query %q", s.q)
	}
	if err := s.check(m, args, 1); err != nil {
		return nil, err
	}
	r := &fakeRows{}
	if exp, ok := f.rows[args[0].(string)]; ok {
		r.vals = []int64{exp}
	}
	return r, nil
}

type fakeRows struct{ vals []int64 }

func (r *fakeRows) Columns() []string { return []string{"expires_at"} }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if len(r.vals) == 0 {
		return io.EOF
	}
	dest[0], r.vals = r.vals[0], r.vals[1:]
	return nil
}
