package amqp

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/sluicemq/sluice/internal/amqp/wire"
	"github.com/sluicemq/sluice/internal/auth/password"
)

func compileUser(u User) (*user, error) {
	if u.Name == "" {
		return nil, fmt.Errorf("amqp: a user needs a name")
	}
	out := &user{name: u.Name, tags: u.Tags, perms: make(map[string]*perm)}
	switch {
	case u.PasswordHash != "":
		v, err := password.Parse(u.PasswordHash)
		if err != nil {
			return nil, fmt.Errorf("amqp: user %q: PasswordHash %v", u.Name, err)
		}
		out.verifier = v.Verify
	case u.Password != "":
		want := []byte(u.Password)
		out.verifier = func(p string) bool { return subtle.ConstantTimeCompare([]byte(p), want) == 1 }
	default:
		return nil, fmt.Errorf("amqp: user %q has no password", u.Name)
	}
	for vh, p := range u.Permissions {
		cp := &perm{}
		for _, x := range []struct {
			dst **regexp.Regexp
			any *bool
			src string
		}{{&cp.configure, &cp.anyConfigure, p.Configure}, {&cp.write, &cp.anyWrite, p.Write}, {&cp.read, &cp.anyRead, p.Read}} {
			if x.src == "" {
				continue
			}
			re, err := regexp.Compile(x.src)
			if err != nil {
				return nil, fmt.Errorf("amqp: user %q vhost %q: %w", u.Name, vh, err)
			}
			*x.dst = re
			*x.any = matchesAnything(x.src)
		}
		out.perms[vh] = cp
	}
	return out, nil
}

// Permission kinds.
const (
	permConfigure = iota
	permWrite
	permRead
)

// allowed reports whether u has permission kind on a resource of vhost.
func (u *user) allowed(vhost string, kind int, name string) bool {
	p := u.perms[vhost]
	if p == nil {
		return false
	}
	if [...]bool{p.anyConfigure, p.anyWrite, p.anyRead}[kind] {
		return true
	}
	re := [...]*regexp.Regexp{p.configure, p.write, p.read}[kind]
	return re != nil && re.MatchString(name)
}

// matchesAnything reports whether permission pattern src, matched
// unanchored as RabbitMQ and regexp.MatchString match it, matches every
// string. It knows the patterns operators write for "everything" (an
// empty match at the start or end of any name); for any other pattern it
// says false and the regexp decides.
func matchesAnything(src string) bool {
	switch src {
	case ".*", "^.*", ".*$", "(.*)":
		return true
	}
	return false
}

// check returns RabbitMQ's 403 when u lacks permission kind on the
// resource ("queue" or "exchange").
func (u *user) check(vhost string, kind int, resKind, name string) error {
	if u.allowed(vhost, kind, name) {
		return nil
	}
	return errorf(wire.AccessRefused, "access to %s refused for user '%s'", rs(resKind, name, vhost), u.name)
}

// credentials extracts user name and password from a start-ok response.
//
// PLAIN is "authzid \0 user \0 password" (authzid ignored). AMQPLAIN is a
// field table with LOGIN and PASSWORD; amqplib sends it without the
// table's length prefix, so entries are parsed to the end of the response
// and a leading length is skipped only if it equals the bytes that follow.
func credentials(mechanism, response string) (name, password string, ok bool) {
	switch mechanism {
	case "PLAIN":
		parts := strings.Split(response, "\x00")
		if len(parts) != 3 {
			return "", "", false
		}
		return parts[1], parts[2], true
	case "AMQPLAIN":
		b := []byte(response)
		var t wire.Table
		var err error
		if len(b) >= 4 && int(binary.BigEndian.Uint32(b)) == len(b)-4 {
			t, err = wire.ParseTable(b)
		} else {
			t, err = wire.ParseTableBody(b)
		}
		if err != nil {
			return "", "", false
		}
		l, ok1 := t.Get("LOGIN")
		p, ok2 := t.Get("PASSWORD")
		ls, ok3 := asString(l)
		ps, ok4 := asString(p)
		return ls, ps, ok1 && ok2 && ok3 && ok4
	}
	return "", "", false
}

// asString accepts a long string or a byte array.
func asString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

// authenticate checks credentials; remote is the client's address, for
// loopback-only users.
func (s *Server) authenticate(name, password string, remote net.Addr) (*user, error) {
	u := s.users[name]
	if u == nil || !u.verifier(password) {
		return nil, fmt.Errorf("invalid credentials")
	}
	if u.loopback && !isLoopback(remote) {
		return nil, fmt.Errorf("user '%s' can only connect via localhost", name)
	}
	return u, nil
}

func isLoopback(a net.Addr) bool {
	switch x := a.(type) {
	case *net.TCPAddr:
		return x.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	case nil:
		return false
	}
	if a.Network() == "pipe" { // net.Pipe, in-process
		return true
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
