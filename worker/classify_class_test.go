package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
)

type orderError struct{ id string }

func (e *orderError) Error() string { return "order " + e.id }

// Plain Go errors get a class that groups them usefully instead of
// "*errors.errorString" for all of them.
func TestErrorClassOfPlainErrors(t *testing.T) {
	_, pathErr := os.Open("/nonexistent/sluice")
	var syntaxErr error = json.Unmarshal([]byte("{"), new(any))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("cannot parse order"), "cannot parse order"},
		{fmt.Errorf("lookup customer %s: no such customer", "c-404"), "lookup customer c-N: no such customer"},
		{fmt.Errorf("lookup customer %s: no such customer", "c-7"), "lookup customer c-N: no such customer"},
		{fmt.Errorf("order %q rejected after %d tries", "o-1", 3), `order "…" rejected after N tries`},
		{fmt.Errorf("message 86390037-44f4-4725-8dcf-fdba954be5b9 failed"), "message … failed"},
		{fmt.Errorf("handler: %w", fs.ErrNotExist), "file does not exist"},
		{errors.Join(errors.New("first 1"), errors.New("second")), "first N"},
		// A typed error anywhere in the chain names the class: the
		// innermost one that is not a plain carrier.
		{fmt.Errorf("open config: %w", pathErr), "syscall.Errno"},
		{fmt.Errorf("decode: %w", syntaxErr), "*json.SyntaxError"},
		{fmt.Errorf("outer: %w", &orderError{"o-1"}), "*worker.orderError"},
		{Terminal(errors.New("bad input 42")), "bad input N"},
		{errors.New("   "), "error"},
		{errors.New(strings.Repeat("x", 500)), strings.Repeat("x", MaxNormalisedClass)},
	} {
		if got := errorClass(tc.err); got != tc.want {
			t.Errorf("errorClass(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
