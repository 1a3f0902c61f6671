package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// Class says whether retrying a failed delivery can help.
type Class int

const (
	// ClassUnknown: nothing says. Options.UnknownIsTransient decides.
	ClassUnknown Class = iota
	// ClassTransient: the failure may go away (a timeout, a 503, a
	// deadlock); the message is retried after a backoff.
	ClassTransient
	// ClassTerminal: retrying repeats the failure (invalid input, a
	// missing row, a bug); the message is dead-lettered at once.
	ClassTerminal
)

func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassTerminal:
		return "terminal"
	}
	return "unknown"
}

// Classifier maps an error to a Class. It is consulted for errors that
// were not wrapped with Terminal or Transient; returning ClassUnknown
// leaves the decision to the built-in rules and then to
// Options.UnknownIsTransient.
type Classifier func(error) Class

// Sentinels matched by errors.Is on errors wrapped with Terminal and
// Transient: errors.Is(err, ErrTerminal) reports whether err was marked
// terminal anywhere in its chain.
var (
	ErrTerminal  = errors.New("worker: terminal failure")
	ErrTransient = errors.New("worker: transient failure")
)

// classified marks an error with a class, and optionally a retry time.
type classified struct {
	err      error
	class    Class
	after    time.Duration
	hasAfter bool
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }
func (e *classified) Is(target error) bool {
	return (target == ErrTerminal && e.class == ClassTerminal) ||
		(target == ErrTransient && e.class == ClassTransient)
}

// Terminal marks err as terminal: the message is dead-lettered on this
// attempt. The result wraps err (errors.Is and errors.As see through it)
// and matches ErrTerminal. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ClassTerminal}
}

// Transient marks err as transient: the message is retried after a
// backoff. The result wraps err and matches ErrTransient. Transient(nil)
// is nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ClassTransient}
}

// RetryAfter marks err as transient with a known retry time (an HTTP 429
// or 503 with Retry-After): the message is delivered again after d, which
// overrides the backoff and the broker's retry policy. It still counts
// against the retry budget. RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: ClassTransient, after: max(d, 0), hasAfter: true}
}

// Classed is implemented by errors that name their own error class, the
// short name recorded with a failed message (SluiceErrorClass) and used to
// filter dead-letter queues. Without it the class is the Go type of the
// innermost error in the chain.
type Classed interface {
	ErrorClass() string
}

// PanicError is a recovered handler panic.
type PanicError struct {
	Value any
	Stack []byte // the panicking goroutine's stack
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// ErrorClass is "panic" followed by the panic value's type.
func (e *PanicError) ErrorClass() string { return fmt.Sprintf("panic(%T)", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// classify decides the class of a handler error, in this order: a
// Terminal/Transient/RetryAfter mark (the outermost wins), a panic
// (PanicIsTerminal), the Classifier, the built-in rules (timeouts are
// transient), and finally UnknownIsTransient.
func (w *Worker) classify(err error) (c Class, after time.Duration, hasAfter bool) {
	var m *classified
	if errors.As(err, &m) {
		return m.class, m.after, m.hasAfter
	}
	var p *PanicError
	if errors.As(err, &p) {
		if w.opts.PanicIsTerminal {
			return ClassTerminal, 0, false
		}
		return ClassTransient, 0, false
	}
	if w.opts.Classifier != nil {
		if cl := w.opts.Classifier(err); cl != ClassUnknown {
			return cl, 0, false
		}
	}
	if cl := builtinClass(err); cl != ClassUnknown {
		return cl, 0, false
	}
	if w.opts.UnknownIsTransient {
		return ClassTransient, 0, false
	}
	return ClassTerminal, 0, false
}

// builtinClass knows only timeouts: a deadline that ran out, or a network
// timeout, is transient.
func builtinClass(err error) Class {
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassTransient
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTransient
	}
	return ClassUnknown
}

// errorClass is the class name recorded for err: the first Classed in the
// chain; else the Go type of the innermost error in the chain whose type
// says something (a *json.SyntaxError, a syscall.Errno, a *MyError); else,
// when every error in the chain is a plain one (errors.New, fmt.Errorf,
// errors.Join), the innermost message normalised so that errors that
// differ only in ids and numbers share a class ("lookup customer c-N: no
// such customer", "unexpected EOF"). A DLQ grouped by class is then
// useful even for handlers that never define an error type.
func errorClass(err error) string {
	var c Classed
	if errors.As(err, &c) {
		if s := c.ErrorClass(); s != "" {
			return s
		}
	}
	var chain []error
	for e := err; e != nil; {
		chain = append(chain, e)
		next := errors.Unwrap(e)
		if next == nil {
			if m, ok := e.(interface{ Unwrap() []error }); ok {
				if errs := m.Unwrap(); len(errs) > 0 && errs[0] != nil {
					next = errs[0]
				}
			}
		}
		e = next
	}
	for i := len(chain) - 1; i >= 0; i-- {
		if _, mark := chain[i].(*classified); mark {
			continue // Terminal/Transient/RetryAfter's wrapper
		}
		if t := reflect.TypeOf(chain[i]).String(); !plainErrorType(t) {
			return t
		}
	}
	return normaliseMessage(chain[len(chain)-1].Error())
}

// plainErrorType reports whether t is one of the standard library's
// carriers of a message and nothing else, whose name would be the same for
// every such error.
func plainErrorType(t string) bool {
	switch t {
	case "*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
		return true
	}
	return false
}

// MaxNormalisedClass caps an error class made from a message.
const MaxNormalisedClass = 80

var (
	quotedRE = regexp.MustCompile(`"[^"]*"|'[^']*'`)
	hexRE    = regexp.MustCompile(`\b[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,})*\b`)
	digitsRE = regexp.MustCompile(`[0-9]+`)
	spaceRE  = regexp.MustCompile(`\s+`)
)

// normaliseMessage turns an error message into a class: quoted strings
// become "…", long hex runs and UUIDs "…", digit runs N, whitespace one
// space, at most MaxNormalisedClass bytes.
func normaliseMessage(msg string) string {
	s := quotedRE.ReplaceAllString(msg, `"…"`)
	s = hexRE.ReplaceAllString(s, "…")
	s = digitsRE.ReplaceAllString(s, "N")
	s = strings.TrimSpace(spaceRE.ReplaceAllString(s, " "))
	if s == "" {
		return "error"
	}
	return truncate(s, MaxNormalisedClass)
}

// errorTrace is the trace recorded for err: the panic stack, or the chain
// of errors with their types (Go errors carry no stack of their own).
func errorTrace(err error) string {
	var p *PanicError
	if errors.As(err, &p) && len(p.Stack) > 0 {
		return truncate(string(p.Stack), MaxTrace)
	}
	var b strings.Builder
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, ok := e.(*classified); ok {
			continue
		}
		fmt.Fprintf(&b, "%T: %s\n", e, e.Error())
		if b.Len() > MaxTrace {
			break
		}
	}
	return truncate(b.String(), MaxTrace)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}
