package lint

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The docs prove their claims by naming tests: docs/guarantees.md names,
// for each promise, the test that shows it; the compatibility pages, ADRs
// and reliability notes name theirs. TestDocsCiteTestsThatExist checks that
// every Test or Fuzz function a Markdown file of the repository names is
// declared in one of its _test.go files, so a test renamed or removed
// fails here until the docs follow. (guarantees.md cited one for a week
// that had never been committed.)

// peerSuiteTests are tests of other projects' suites that the docs name
// when they report running them against Sluice (docs/amqp-compat.md).
var peerSuiteTests = map[string]string{
	"TestA":                                 "an example of AMQP_PEER_EXTRA_SKIP",
	"TestB":                                 "an example of AMQP_PEER_EXTRA_SKIP",
	"TestBasicGet":                          "pika's acceptance suite",
	"TestBasicCancelWithNonAckableConsumer": "pika's acceptance suite",
	"TestConnectionRecovery":                "amqp091-go's integration suite",
	"TestConnectionRecoveryPublish":         "amqp091-go's integration suite",
	"TestConnectionRecoverySkipAndContinueNoInfiniteLoop": "amqp091-go's integration suite",
	"TestConnection_Close_WhenMemoryAlarmIsActive":        "amqp091-go's integration suite",
	"TestIntegrationConsumeFlow":                          "amqp091-go's integration suite",
	"TestNotifyClosesAllChansAfterConnectionClose":        "amqp091-go's unit tests (client only)",
	"TestIntegrationRecoverNotImplemented":                "amqp091-go's integration suite",
	"TestRabbitMQQueueNackMultipleRequeue":                "amqp091-go's integration suite",
	"TestRabbitMQQueueTTLGet":                             "amqp091-go's integration suite",
}

var (
	citedTest    = regexp.MustCompile(`\b(?:Test|Fuzz)[A-Z][A-Za-z0-9_]*`)
	declaredTest = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Z][A-Za-z0-9_]*)\(`)
)

// skipDir reports whether a walk of the repository skips dir.
func skipDir(name string) bool {
	return name == ".git" || name == "node_modules" || name == "testdata"
}

func TestDocsCiteTestsThatExist(t *testing.T) {
	const root = "../.."
	declared := map[string]bool{}
	cited := map[string][]string{} // test name → files citing it
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if path != root && skipDir(e.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		name := e.Name()
		if !strings.HasSuffix(name, "_test.go") && !strings.HasSuffix(name, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(name, "_test.go") {
			for _, m := range declaredTest.FindAllStringSubmatch(string(b), -1) {
				declared[m[1]] = true
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		for _, n := range citedTest.FindAllString(string(b), -1) {
			if !slices.Contains(cited[n], rel) {
				cited[n] = append(cited[n], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(declared) < 100 || len(cited) < 50 {
		t.Fatalf("found %d declared tests and %d cited names: the walk missed the repository", len(declared), len(cited))
	}
	var missing []string
	for n, files := range cited {
		if declared[n] || peerSuiteTests[n] != "" {
			continue
		}
		missing = append(missing, n+" (cited in "+strings.Join(files, ", ")+")")
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("the docs cite %s, which no _test.go declares", m)
	}
	for n, why := range peerSuiteTests {
		if declared[n] {
			t.Errorf("%s is listed as another project's test (%s) but is declared here too: take it off the list", n, why)
		}
		if len(cited[n]) == 0 {
			t.Errorf("%s is listed as another project's test (%s) but no doc cites it any more: take it off the list", n, why)
		}
	}
}
