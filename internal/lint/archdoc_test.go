package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/architecture.md names the functions, methods, types and fields of
// the code, most of all in its walk-throughs, which follow a request
// through them. TestArchitectureDocNames checks that every such name exists
// in the broker's code, so renaming a function the doc names fails here
// until the doc follows.

// archDocNotCode are names in docs/architecture.md that are not Go
// identifiers of this module: config keys, metric names, protocol fields,
// SQS error codes, the Locked suffix.
var archDocNotCode = map[string]bool{
	"sqs_listen":                          true,
	"amqp_listen":                         true,
	"amqps_listen":                        true,
	"internal_http_listen":                true,
	"replace_after":                       true,
	"replication_factor":                  true,
	"internal_amqp_listen":                true,
	"body_memory_budget":                  true,
	"ready_memory_budget":                 true,
	"sluice_amqp_refused_publishes_total": true,
	"user_id":                             true,
	"InternalFailure":                     true,
	"Locked":                              true,
}

// archDocExternal are names from the standard library and pebble.
var archDocExternal = map[string]bool{
	"http.Server.Serve":     true,
	"http.ServeMux":         true,
	"tls.NewListener":       true,
	"httputil.ReverseProxy": true,
	"io.Copy":               true,
	"DB.ApplyNoSyncWait":    true, // pebble
	"Batch.SyncWait":        true, // pebble
}

// goDecls is what the module's non-test Go files declare.
type goDecls struct {
	pkgs    map[string]bool            // package names
	names   map[string]bool            // funcs, methods, types, consts, vars, struct fields
	members map[string]map[string]bool // type name → its methods and fields
}

func (d *goDecls) member(typ, name string) {
	if d.members[typ] == nil {
		d.members[typ] = map[string]bool{}
	}
	d.members[typ][name] = true
	d.names[name] = true
}

// parseModule reads the declarations of every non-test Go file of the root
// module (cmd/, internal/, test/).
func parseModule(t *testing.T, root string) *goDecls {
	t.Helper()
	d := &goDecls{pkgs: map[string]bool{}, names: map[string]bool{}, members: map[string]map[string]bool{}}
	fset := token.NewFileSet()
	for _, top := range []string{"cmd", "internal", "test"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && e.Name() == "testdata" {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			d.pkgs[f.Name.Name] = true
			for _, decl := range f.Decls {
				switch decl := decl.(type) {
				case *ast.FuncDecl:
					if decl.Recv != nil && len(decl.Recv.List) == 1 {
						d.member(receiverType(decl.Recv.List[0].Type), decl.Name.Name)
					} else {
						d.names[decl.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, spec := range decl.Specs {
						switch spec := spec.(type) {
						case *ast.TypeSpec:
							d.names[spec.Name.Name] = true
							if st, ok := spec.Type.(*ast.StructType); ok {
								for _, field := range st.Fields.List {
									for _, n := range field.Names {
										d.member(spec.Name.Name, n.Name)
									}
								}
							}
						case *ast.ValueSpec:
							for _, n := range spec.Names {
								d.names[n.Name] = true
							}
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// receiverType is the base type name of a method's receiver.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

var goName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// resolve reports whether a code span of the doc names something
// that exists. Spans that are not Go names (paths, headers, "[[…]]") are
// not checked.
func (d *goDecls) resolve(span string) (checked, ok bool) {
	s := strings.TrimPrefix(span, "(*")
	s = strings.Replace(s, ").", ".", 1)
	if i := strings.IndexByte(s, '('); i >= 0 {
		s = s[:i] // a call: check the callee
	}
	if !goName.MatchString(s) {
		return false, false
	}
	if archDocNotCode[s] || archDocExternal[s] {
		return true, true
	}
	return true, d.exists(strings.Split(s, "."))
}

// exists resolves a dotted name: Name, Type.member, AMQP class.method, each
// optionally qualified by a package name (sqs.Handler.ServeHTTP).
func (d *goDecls) exists(parts []string) bool {
	if len(parts) > 1 && d.pkgs[parts[0]] && d.exists(parts[1:]) {
		return true
	}
	switch len(parts) {
	case 1:
		return d.names[parts[0]] || d.pkgs[parts[0]]
	case 2:
		// An AMQP method (basic.ack) is the generated wire type BasicAck.
		return d.members[parts[0]][parts[1]] || d.names[title(parts[0])+title(parts[1])]
	}
	return false
}

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// fencedBlock is a fenced code block of a Markdown file (its text is a
// diagram, not code spans).
var fencedBlock = regexp.MustCompile("(?s)```.*?```")

func TestArchitectureDocNames(t *testing.T) {
	const root = "../.."
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := fencedBlock.ReplaceAllString(string(doc), "")
	if !strings.Contains(text, "\n## Walk-throughs\n") {
		t.Fatal(`docs/architecture.md has no "## Walk-throughs" section`)
	}
	d := parseModule(t, root)
	checked := 0
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(text, -1) {
		c, ok := d.resolve(m[1])
		if !c {
			continue
		}
		checked++
		if !ok {
			t.Errorf("docs/architecture.md: `%s` names nothing in the code (renamed? update the doc)", m[1])
		}
	}
	// The doc names well over a hundred; far fewer means the extraction
	// broke, and the test would pass without checking.
	if checked < 150 {
		t.Fatalf("only %d names checked in docs/architecture.md", checked)
	}
}
