package dedup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/worker"
)

// SQL is a Deduper over a database/sql table, shared by every worker that
// uses the same database. It uses only portable SQL (no upsert dialects),
// so it runs on SQLite, PostgreSQL and MySQL with the right Placeholder.
//
// The table (CreateTable makes it):
//
//	CREATE TABLE IF NOT EXISTS sluice_dedup (
//	    message_key VARCHAR(255) NOT NULL PRIMARY KEY, -- the KeyFunc's key
//	    expires_at  BIGINT       NOT NULL              -- Unix milliseconds
//	);
//	CREATE INDEX sluice_dedup_expires_at ON sluice_dedup (expires_at); -- for Purge
//
// Seen reads one row by primary key. Mark updates the row's expiry, or
// inserts it; an insert that loses a race with another worker's insert is
// retried as an update. Expired rows are ignored by Seen and deleted by
// Purge, which the application should call periodically (e.g. hourly).
//
// For exactly-once side effects in the same database, insert the key in
// the transaction that makes the effects, and let Seen find it.
type SQL struct {
	db    *sql.DB
	table string
	ttl   time.Duration
	now   func() time.Time

	qSeen, qUpdate, qInsert, qPurge string
}

var _ worker.Deduper = (*SQL)(nil)

// Placeholder is a driver's bind-parameter style.
type Placeholder int

const (
	Question Placeholder = iota // ? (SQLite, MySQL)
	Dollar                      // $1, $2 (PostgreSQL)
)

// SQLOptions configure an SQL Deduper.
type SQLOptions struct {
	// Table is the table name, optionally schema-qualified. Default
	// "sluice_dedup".
	Table string
	// Placeholder is the driver's parameter style. Default Question.
	Placeholder Placeholder
	// TTL is how long a mark lasts. Default 14 days, the longest SQS
	// retention: no copy of a message can turn up after that.
	TTL time.Duration
}

// MaxKeyLen is the longest key the table holds.
const MaxKeyLen = 255

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// NewSQL returns an SQL Deduper over db.
func NewSQL(db *sql.DB, opts SQLOptions) (*SQL, error) {
	if db == nil {
		return nil, errors.New("dedup: db is nil")
	}
	if opts.Table == "" {
		opts.Table = "sluice_dedup"
	}
	if !identRE.MatchString(opts.Table) {
		return nil, fmt.Errorf("dedup: table name %q is not a plain identifier", opts.Table)
	}
	if opts.TTL == 0 {
		opts.TTL = 14 * 24 * time.Hour
	}
	if opts.TTL < time.Second {
		return nil, fmt.Errorf("dedup: TTL must be at least 1s, got %v", opts.TTL)
	}
	if opts.Placeholder != Question && opts.Placeholder != Dollar {
		return nil, fmt.Errorf("dedup: unknown placeholder style %d", opts.Placeholder)
	}
	p := func(i int) string {
		if opts.Placeholder == Dollar {
			return "$" + strconv.Itoa(i)
		}
		return "?"
	}
	t := opts.Table
	return &SQL{
		db: db, table: t, ttl: opts.TTL, now: time.Now,
		qSeen:   "SELECT expires_at FROM " + t + " WHERE message_key = " + p(1),
		qUpdate: "UPDATE " + t + " SET expires_at = " + p(1) + " WHERE message_key = " + p(2),
		qInsert: "INSERT INTO " + t + " (message_key, expires_at) VALUES (" + p(1) + ", " + p(2) + ")",
		qPurge:  "DELETE FROM " + t + " WHERE expires_at <= " + p(1),
	}, nil
}

// CreateTable creates the table if it does not exist, and its expiry
// index. The index statement's failure because the index exists is
// ignored (not every database has CREATE INDEX IF NOT EXISTS).
func (d *SQL) CreateTable(ctx context.Context) error {
	if _, err := d.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+d.table+
		" (message_key VARCHAR(255) NOT NULL PRIMARY KEY, expires_at BIGINT NOT NULL)"); err != nil {
		return fmt.Errorf("dedup: create table: %w", err)
	}
	idx := strings.ReplaceAll(d.table, ".", "_") + "_expires_at"
	if _, err := d.db.ExecContext(ctx, "CREATE INDEX "+idx+" ON "+d.table+" (expires_at)"); err != nil &&
		!strings.Contains(strings.ToLower(err.Error()), "exist") {
		return fmt.Errorf("dedup: create index: %w", err)
	}
	return nil
}

func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("dedup: key must be 1–%d bytes, got %d", MaxKeyLen, len(key))
	}
	return nil
}

// Seen reports whether key has an unexpired mark.
func (d *SQL) Seen(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	var exp int64
	err := d.db.QueryRowContext(ctx, d.qSeen, key).Scan(&exp)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("dedup: seen: %w", err)
	}
	return exp > d.now().UnixMilli(), nil
}

// Mark records key until now + TTL.
func (d *SQL) Mark(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	exp := d.now().Add(d.ttl).UnixMilli()
	update := func() (bool, error) {
		res, err := d.db.ExecContext(ctx, d.qUpdate, exp, key)
		if err != nil {
			return false, fmt.Errorf("dedup: mark: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return false, fmt.Errorf("dedup: mark: %w", err)
		}
		return n > 0, nil
	}
	if ok, err := update(); ok || err != nil {
		return err
	}
	_, ierr := d.db.ExecContext(ctx, d.qInsert, key, exp)
	if ierr == nil {
		return nil
	}
	// Another worker inserted the key between our update and insert.
	if ok, err := update(); ok {
		return nil
	} else if err != nil {
		return err
	}
	return fmt.Errorf("dedup: mark: %w", ierr)
}

// Purge deletes expired marks and returns how many it deleted.
func (d *SQL) Purge(ctx context.Context) (int64, error) {
	res, err := d.db.ExecContext(ctx, d.qPurge, d.now().UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("dedup: purge: %w", err)
	}
	return res.RowsAffected()
}
