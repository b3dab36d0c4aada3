package accesslog_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/accesslog"
)

// TestDocumentedOperators: docs/observability.md lists every operator
// Envoy knows in exactly the list of what the server does with it
// (supported, absent, refused), as the code classifies it.
func TestDocumentedOperators(t *testing.T) {
	doc, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "### Command operators")
	end := strings.Index(text, "### Filters")
	if start < 0 || end < start {
		t.Fatal("docs/observability.md has no \"Command operators\" section before \"Filters\"")
	}
	section := text[start:end]
	markers := []struct{ kind, marker string }{
		{"supported", "Supported, with Envoy's output:"},
		{"absent", "Without a value on a gRPC server"},
		{"notrecorded", "Not recorded by this server"},
	}
	op := regexp.MustCompile("`%([A-Z0-9_]+)%`")
	documented := map[string]string{}
	for i, m := range markers {
		from := strings.Index(section, m.marker)
		if from < 0 {
			t.Fatalf("no list %q", m.marker)
		}
		to := len(section)
		if i+1 < len(markers) {
			to = strings.Index(section, markers[i+1].marker)
		}
		for _, sub := range op.FindAllStringSubmatch(section[from:to], -1) {
			if prev, ok := documented[sub[1]]; ok && prev != m.kind {
				t.Errorf("%%%s%% is documented as %s and %s", sub[1], prev, m.kind)
			}
			documented[sub[1]] = m.kind
		}
	}
	kinds := accesslog.CommandKinds()
	var names []string
	for name := range kinds {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if got := documented[name]; got != kinds[name] {
			t.Errorf("%%%s%%: documented as %q, the code has it %s", name, got, kinds[name])
		}
	}
	for name := range documented {
		if _, ok := kinds[name]; !ok {
			t.Errorf("%%%s%% is documented but the code does not know it", name)
		}
	}
}
