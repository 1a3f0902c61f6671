package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestStorageFormatDocumented keeps docs/storage-format.md complete: every
// key prefix (a const named prefix…) and every message-record extension tag
// (a const named tag…) declared in the engine's source must have a row in
// the document's "Keys" and "Extension tags" tables, and every row there
// must name one the engine declares. The constants are read from the
// source, so adding one without documenting it fails here.
func TestStorageFormatDocumented(t *testing.T) {
	prefixes, tags := formatConsts(t)
	// Guard against a parser that finds nothing: these are known.
	if prefixes[prefixQueue] == "" || prefixes[prefixMessage] == "" || tags[tagDeadLetter] == "" || tags[tagCrashes] == "" {
		t.Fatalf("source scan missed known constants: prefixes %v, tags %v", prefixes, tags)
	}

	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "storage-format.md"))
	if err != nil {
		t.Fatal(err)
	}
	keyCells := tableFirstCells(t, string(doc), "## Keys")
	tagCells := tableFirstCells(t, string(doc), "### Extension tags")

	docPrefixes := map[int64]bool{}
	keyRe := regexp.MustCompile("^`([^`])`")
	for _, c := range keyCells {
		m := keyRe.FindStringSubmatch(c)
		if m == nil {
			t.Errorf("storage-format.md Keys row %q does not start with a one-character key prefix in backquotes", c)
			continue
		}
		docPrefixes[int64(m[1][0])] = true
	}
	docTags := map[int64]bool{}
	for _, c := range tagCells {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			t.Errorf("storage-format.md Extension tags row %q does not start with a tag number", c)
			continue
		}
		docTags[n] = true
	}

	for _, v := range slices.Sorted(maps.Keys(prefixes)) {
		if !docPrefixes[v] {
			t.Errorf("key prefix %s = %q is not in docs/storage-format.md's Keys table: document it", prefixes[v], rune(v))
		}
	}
	for _, v := range slices.Sorted(maps.Keys(docPrefixes)) {
		if prefixes[v] == "" {
			t.Errorf("docs/storage-format.md documents key prefix %q, which the engine does not declare", rune(v))
		}
	}
	for _, v := range slices.Sorted(maps.Keys(tags)) {
		if !docTags[v] {
			t.Errorf("extension tag %s = %d is not in docs/storage-format.md's Extension tags table: document it", tags[v], v)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(docTags)) {
		if tags[v] == "" {
			t.Errorf("docs/storage-format.md documents extension tag %d, which the engine does not declare", v)
		}
	}
}

// formatConsts parses the engine's non-test Go files and returns the
// values of its constants named prefix… (key prefixes) and tag…
// (extension tags), each mapped to the constant's name. Two constants of
// one kind with one value fail the test: they would collide on disk.
func formatConsts(t *testing.T) (prefixes, tags map[int64]string) {
	t.Helper()
	prefixes, tags = map[int64]string{}, map[int64]string{}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, id := range vs.Names {
					var into map[int64]string
					switch {
					case isFormatConst(id.Name, "prefix"):
						into = prefixes
					case isFormatConst(id.Name, "tag"):
						into = tags
					default:
						continue
					}
					if i >= len(vs.Values) {
						t.Errorf("%s: %s has no literal value; give it one so this test can read it", fset.Position(id.Pos()), id.Name)
						continue
					}
					v, ok := literalValue(vs.Values[i])
					if !ok {
						t.Errorf("%s: %s is not a character or integer literal; make it one so this test can read it", fset.Position(id.Pos()), id.Name)
						continue
					}
					if other := into[v]; other != "" {
						t.Errorf("%s: %s has the value of %s", fset.Position(id.Pos()), id.Name, other)
					}
					into[v] = id.Name
				}
			}
		}
	}
	return prefixes, tags
}

// isFormatConst reports whether name is kind followed by an upper-case
// letter (prefixQueue, tagTTL; not prefixes or tagged).
func isFormatConst(name, kind string) bool {
	rest, ok := strings.CutPrefix(name, kind)
	return ok && rest != "" && rest[0] >= 'A' && rest[0] <= 'Z'
}

func literalValue(x ast.Expr) (int64, bool) {
	lit, ok := x.(*ast.BasicLit)
	if !ok {
		return 0, false
	}
	switch lit.Kind {
	case token.CHAR:
		s, err := strconv.Unquote(lit.Value)
		if err != nil || len(s) != 1 {
			return 0, false
		}
		return int64(s[0]), true
	case token.INT:
		v, err := strconv.ParseInt(lit.Value, 0, 64)
		return v, err == nil
	}
	return 0, false
}

// tableFirstCells returns the first cell of each body row of the first
// Markdown table after the line heading (exactly), without the header and
// separator rows. A missing heading or table fails the test.
func tableFirstCells(t *testing.T, doc, heading string) []string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, heading)
	if start < 0 {
		t.Fatalf("docs/storage-format.md has no %q section", heading)
	}
	var cells []string
	inTable, row := false, 0
	for _, l := range lines[start+1:] {
		if strings.HasPrefix(l, "#") && !inTable {
			break
		}
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		row++
		if row <= 2 { // header and separator
			continue
		}
		cells = append(cells, strings.TrimSpace(strings.Split(l, "|")[1]))
	}
	if len(cells) == 0 {
		t.Fatalf("docs/storage-format.md section %q has no table", heading)
	}
	return cells
}

func TestIsFormatConst(t *testing.T) {
	for _, c := range []struct {
		name, kind string
		want       bool
	}{
		{"prefixQueue", "prefix", true},
		{"prefix", "prefix", false},
		{"prefixes", "prefix", false},
		{"tagTTL", "tag", true},
		{"tagged", "tag", false},
		{"kindContent", "tag", false},
	} {
		if got := isFormatConst(c.name, c.kind); got != c.want {
			t.Errorf("isFormatConst(%q, %q) = %v, want %v", c.name, c.kind, got, c.want)
		}
	}
}
