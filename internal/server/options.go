package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sluicemq/sluice/internal/alerts"
	"github.com/sluicemq/sluice/internal/amqp"
	"github.com/sluicemq/sluice/internal/auth/httpauth"
	"github.com/sluicemq/sluice/internal/auth/sigv4"
	"github.com/sluicemq/sluice/internal/buildinfo"
)

// Options configure a Sluice server. Start from DefaultOptions, then apply a
// config file (LoadFile) and flags; Validate runs before anything starts,
// and a bad value stops the start with a message naming the setting.
type Options struct {
	// DataDir holds the durable store. Created if missing.
	DataDir string `toml:"data_dir"`
	// Store is "disk" (the default: pebble in DataDir, every acknowledged
	// write fsynced) or "memory" (nothing survives a restart; for tests
	// and demos only).
	Store string `toml:"store"`
	// SQSListen is the address of the SQS HTTP API, the health endpoint
	// and (later) the admin API and dashboard. Port 0 picks a free port.
	SQSListen string `toml:"sqs_listen"`
	// AccountID and Region appear in queue URLs and ARNs. Clients only
	// need them to be consistent.
	AccountID string `toml:"account_id"`
	Region    string `toml:"region"`
	// ReadyFile, if set, is written (atomically) once the listeners are
	// up, with JSON {"sqs":"host:port","pid":N}. Tests and scripts that
	// start Sluice on port 0 read the address from it.
	ReadyFile string `toml:"ready_file"`
	// LogLevel is debug, info, warn or error. LogFormat is text or json.
	LogLevel  string `toml:"log_level"`
	LogFormat string `toml:"log_format"`
	// BodyMemoryBudget caps the bytes of message bodies kept in memory;
	// bodies beyond it stay on disk and are read when needed. 0: the
	// engine's default (512 MiB); negative: no cap.
	BodyMemoryBudget int64 `toml:"body_memory_budget"`

	// MinFreeDisk is the free space (bytes) below which the broker refuses
	// new messages until space returns (back-pressure instead of running
	// the store into ENOSPC). 0 turns the watch off.
	MinFreeDisk int64 `toml:"min_free_disk"`

	// MaxHTTPConnections caps open connections on the HTTP listener;
	// beyond it new connections wait in the kernel's backlog. 0: no cap.
	MaxHTTPConnections int `toml:"max_http_connections"`

	// AMQPListen is the AMQP 0-9-1 listener; "" turns it off.
	AMQPListen string `toml:"amqp_listen"`
	// AMQPSListen is an AMQP-over-TLS listener (needs [tls]); "" is off.
	AMQPSListen string `toml:"amqps_listen"`
	// AMQPUsers may log in over AMQP. Empty: guest/guest, from loopback
	// only, as RabbitMQ.
	AMQPUsers []AMQPUser `toml:"amqp_users"`

	// SQSCredentials, when set, make every SQS request prove itself with
	// AWS Signature Version 4 using one of these keys.
	SQSCredentials []SQSCredential `toml:"sqs_credentials"`
	// HTTPAuth guards the admin API, dashboard, advisor, alerts and
	// /metrics with bearer tokens or basic auth. /health stays open.
	HTTPAuth HTTPAuthConfig `toml:"http_auth"`
	// TLS, when set, makes the HTTP listener serve HTTPS and enables
	// AMQPSListen.
	TLS TLSConfig `toml:"tls"`

	// AllowNonLoopback permits listening beyond loopback without
	// credentials. Without it, a non-loopback listener is refused unless
	// its protocol's credentials are configured (SQS keys and HTTP auth
	// for the HTTP listener; AMQP users for AMQP).
	AllowNonLoopback bool `toml:"allow_non_loopback"`

	// Alerts configures the built-in alert rules and their webhooks.
	Alerts AlertsConfig `toml:"alerts"`

	// Queues, Exchanges, AMQPQueues and Bindings are declared at every
	// start, before the listeners open ([[queues]], [[exchanges]],
	// [[amqp_queues]], [[bindings]]; see Definitions). What exists with
	// the same settings is left alone; a declared SQS queue whose
	// attributes changed in the file gets the new values; an AMQP object
	// declared with different settings stops the start.
	Queues     []QueueDeclaration        `toml:"queues"`
	Exchanges  []amqp.ExchangeDefinition `toml:"exchanges"`
	AMQPQueues []amqp.QueueDefinition    `toml:"amqp_queues"`
	Bindings   []amqp.BindingDefinition  `toml:"bindings"`

	// Build names the running build, for the startup log line and the
	// sluice_build_info metric. cmd/sluice fills it from buildinfo.Read;
	// it is not a config file setting.
	Build buildinfo.Info `toml:"-"`
}

// AMQPUser is one [[amqp_users]] entry. PasswordHash comes from
// `sluice hash-password --amqp`; Password (plaintext) is for development.
type AMQPUser struct {
	Name         string                    `toml:"name"`
	PasswordHash string                    `toml:"password_hash"`
	Password     string                    `toml:"password"`
	Tags         []string                  `toml:"tags"`
	Permissions  map[string]AMQPPermission `toml:"permissions"` // vhost → permissions
}

// AMQPPermission holds RabbitMQ's configure/write/read regular expressions.
type AMQPPermission struct {
	Configure string `toml:"configure"`
	Write     string `toml:"write"`
	Read      string `toml:"read"`
}

// SQSCredential is one [[sqs_credentials]] entry.
type SQSCredential struct {
	AccessKeyID     string   `toml:"access_key_id"`
	SecretAccessKey string   `toml:"secret_access_key"`
	Account         string   `toml:"account"`
	Queues          []string `toml:"queues"` // allow-list; empty: every queue
}

// HTTPAuthConfig is the [http_auth] section. Users map a name to a hash from
// `sluice hash-password`.
type HTTPAuthConfig struct {
	Tokens []string          `toml:"tokens"`
	Users  map[string]string `toml:"users"`
	Realm  string            `toml:"realm"`
}

// TLSConfig is the [tls] section: PEM files for a certificate and its key.
type TLSConfig struct {
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
}

func (c HTTPAuthConfig) options() httpauth.Options {
	return httpauth.Options{Tokens: c.Tokens, Users: c.Users, Realm: c.Realm}
}

func (o *Options) sigv4Credentials() []sigv4.Credentials {
	out := make([]sigv4.Credentials, len(o.SQSCredentials))
	for i, c := range o.SQSCredentials {
		out[i] = sigv4.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, Account: c.Account, Queues: c.Queues}
	}
	return out
}

func (o *Options) amqpUsers() []amqp.User {
	out := make([]amqp.User, len(o.AMQPUsers))
	for i, u := range o.AMQPUsers {
		perms := make(map[string]amqp.Permission, len(u.Permissions))
		for vh, p := range u.Permissions {
			perms[vh] = amqp.Permission{Configure: p.Configure, Write: p.Write, Read: p.Read}
		}
		out[i] = amqp.User{Name: u.Name, PasswordHash: u.PasswordHash, Password: u.Password, Tags: u.Tags, Permissions: perms}
	}
	return out
}

// AlertsConfig is the [alerts] section: the built-in rules' thresholds
// (see docs/observability.md) and where transitions are POSTed. Durations
// are strings such as "15m".
type AlertsConfig struct {
	Interval           duration `toml:"interval"`
	DLQGrowthCount     int      `toml:"dlq_growth_count"`
	DLQGrowthWindow    duration `toml:"dlq_growth_window"`
	DLQDepthWarn       int      `toml:"dlq_depth_warn"`
	DLQDepthCritical   int      `toml:"dlq_depth_critical"`
	QueueDepthWarn     int      `toml:"queue_depth_warn"`
	QueueDepthCritical int      `toml:"queue_depth_critical"`
	OldestAgeWarn      duration `toml:"oldest_age_warn"`
	OldestAgeCritical  duration `toml:"oldest_age_critical"`
	Webhooks           []string `toml:"webhooks"`
	WebhookTimeout     duration `toml:"webhook_timeout"`
	WebhookMaxAttempts int      `toml:"webhook_max_attempts"`
}

// duration is a time.Duration written as a string ("15m") in TOML.
type duration time.Duration

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = duration(v)
	return err
}

func (d duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func alertsConfigFrom(o alerts.Options) AlertsConfig {
	return AlertsConfig{
		Interval: duration(o.Interval), DLQGrowthCount: o.DLQGrowthCount, DLQGrowthWindow: duration(o.DLQGrowthWindow),
		DLQDepthWarn: o.DLQDepthWarn, DLQDepthCritical: o.DLQDepthCritical,
		QueueDepthWarn: o.QueueDepthWarn, QueueDepthCritical: o.QueueDepthCritical,
		OldestAgeWarn: duration(o.OldestAgeWarn), OldestAgeCritical: duration(o.OldestAgeCritical),
		Webhooks: append([]string{}, o.Webhooks...), WebhookTimeout: duration(o.WebhookTimeout), WebhookMaxAttempts: o.WebhookMaxAttempts,
	}
}

// options converts the section to the alerts package's options, keeping
// that package's defaults for what the file cannot set.
func (c AlertsConfig) options() alerts.Options {
	o := alerts.DefaultOptions()
	o.Interval, o.DLQGrowthCount, o.DLQGrowthWindow = time.Duration(c.Interval), c.DLQGrowthCount, time.Duration(c.DLQGrowthWindow)
	o.DLQDepthWarn, o.DLQDepthCritical = c.DLQDepthWarn, c.DLQDepthCritical
	o.QueueDepthWarn, o.QueueDepthCritical = c.QueueDepthWarn, c.QueueDepthCritical
	o.OldestAgeWarn, o.OldestAgeCritical = time.Duration(c.OldestAgeWarn), time.Duration(c.OldestAgeCritical)
	o.Webhooks, o.WebhookTimeout, o.WebhookMaxAttempts = c.Webhooks, time.Duration(c.WebhookTimeout), c.WebhookMaxAttempts
	return o
}

// DefaultOptions returns the settings `sluice server` starts with.
func DefaultOptions() Options {
	return Options{
		DataDir:            "./sluice-data",
		Store:              "disk",
		SQSListen:          "127.0.0.1:9324",
		AMQPListen:         "127.0.0.1:5672",
		MaxHTTPConnections: 10000,
		MinFreeDisk:        256 << 20,
		AccountID:          "000000000000",
		Region:             "us-east-1",
		LogLevel:           "info",
		LogFormat:          "text",
		Alerts:             alertsConfigFrom(alerts.DefaultOptions()),
	}
}

// LoadFile applies the TOML config file at path over o. Unknown keys are an
// error: a misspelt setting must not be silently ignored.
func (o *Options) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	md, err := toml.Decode(string(data), o)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return fmt.Errorf("config %s: unknown setting(s): %s", path, strings.Join(keys, ", "))
	}
	return nil
}

// Validate checks every setting and returns all problems at once.
func (o *Options) Validate() error {
	var errs []error
	switch o.Store {
	case "disk":
		if o.DataDir == "" {
			errs = append(errs, errors.New("data_dir: must not be empty with store = \"disk\""))
		}
	case "memory":
	default:
		errs = append(errs, fmt.Errorf("store: %q is not one of disk, memory", o.Store))
	}
	httpSecured := len(o.SQSCredentials) > 0 && o.HTTPAuth.options().Enabled()
	errs = append(errs, o.checkListen("sqs_listen", o.SQSListen, false, httpSecured,
		"configure [[sqs_credentials]] and [http_auth]")...)
	errs = append(errs, o.checkListen("amqp_listen", o.AMQPListen, true, len(o.AMQPUsers) > 0,
		"configure [[amqp_users]]")...)
	errs = append(errs, o.checkListen("amqps_listen", o.AMQPSListen, true, len(o.AMQPUsers) > 0,
		"configure [[amqp_users]]")...)
	if o.AMQPSListen != "" && o.TLS.Cert == "" {
		errs = append(errs, errors.New("amqps_listen: needs [tls] cert and key"))
	}
	if o.MinFreeDisk < 0 {
		errs = append(errs, errors.New("min_free_disk: must not be negative"))
	}
	if o.MaxHTTPConnections < 0 {
		errs = append(errs, errors.New("max_http_connections: must not be negative"))
	}
	if (o.TLS.Cert == "") != (o.TLS.Key == "") {
		errs = append(errs, errors.New("tls: cert and key go together"))
	}
	if len(o.SQSCredentials) > 0 {
		if err := (sigv4.Options{Credentials: o.sigv4Credentials()}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sqs_credentials: %w", err))
		}
	}
	if err := o.HTTPAuth.options().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("http_auth: %w", err))
	}
	if len(o.AccountID) != 12 || strings.Trim(o.AccountID, "0123456789") != "" {
		errs = append(errs, fmt.Errorf("account_id: %q must be 12 digits", o.AccountID))
	}
	if o.Region == "" || strings.ContainsAny(o.Region, " /:") {
		errs = append(errs, fmt.Errorf("region: %q is not a region name", o.Region))
	}
	switch o.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level: %q is not one of debug, info, warn, error", o.LogLevel))
	}
	switch o.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log_format: %q is not one of text, json", o.LogFormat))
	}
	if err := o.Alerts.options().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("alerts: %w", err))
	}
	return errors.Join(errs...)
}

// checkListen validates one listener address. Beyond loopback it needs
// its protocol's credentials, or allow_non_loopback said on purpose.
func (o *Options) checkListen(key, addr string, optional, secured bool, how string) []error {
	if addr == "" {
		if optional {
			return nil
		}
		return []error{fmt.Errorf("%s: must not be empty", key)}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return []error{fmt.Errorf("%s: %q is not host:port: %v", key, addr, err)}
	}
	if !isLoopback(host) && !secured && !o.AllowNonLoopback {
		return []error{fmt.Errorf("%s: %q is not a loopback address and no credentials are configured; %s, or set allow_non_loopback (--allow-non-loopback) to expose it without them on purpose", key, addr, how)}
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
