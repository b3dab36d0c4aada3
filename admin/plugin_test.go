package admin

import (
	"net"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/status"
)

// tallyFilter is a throw-away filter (not a built-in) whose steps count two
// outcomes and whose Outcomes have a Title: the status page shows its table
// with no code of its own.
type tallyFilter struct{}

var tallyOutcomes = &httpfilter.Outcomes{Values: []string{"passed", "refused"}, Title: "Tally", None: "No tally yet."}

func (tallyFilter) ConfigTypeURLs() []string                                      { return []string{"type.googleapis.com/test.Tally"} }
func (tallyFilter) OverrideTypeURLs() []string                                    { return nil }
func (tallyFilter) IsTerminal() bool                                              { return false }
func (tallyFilter) Outcomes() *httpfilter.Outcomes                                { return tallyOutcomes }
func (tallyFilter) ParseConfig(httpfilter.RawConfig) (httpfilter.Config, error)   { return nil, nil }
func (tallyFilter) ParseOverride(httpfilter.RawConfig) (httpfilter.Config, error) { return nil, nil }
func (tallyFilter) BuildStep(string, httpfilter.Config, httpfilter.Config) (httpfilter.Step, error) {
	return nil, nil
}

// TestPluginFilterReported: a registered counting filter gets a table on
// the status page, empty ("None") until it counts, then a row per
// instance; the RBAC table stays as it was.
func TestPluginFilterReported(t *testing.T) {
	builtin.Registry.Register(tallyFilter{}) // the one line

	render := func(counts []rpcpath.FilterCount) string {
		st := &status.Server{Listeners: []status.Listener{{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}, Counted: counts}}}
		var b strings.Builder
		if err := pageTemplate.Execute(&b, buildPage(st)); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	page := render(nil)
	for _, want := range []string{"<h3>Tally</h3>", "No tally yet.", "<h3>RBAC decisions</h3>", "No RBAC filter has decided an RPC."} {
		if !strings.Contains(page, want) {
			t.Errorf("page without counts lacks %q", want)
		}
	}
	page = render([]rpcpath.FilterCount{{Outcomes: tallyOutcomes, Filter: "tally-1", Counts: []uint64{2, 3}}})
	want := "<tr><th>HTTP filter</th><th>Passed</th><th>Refused</th></tr>\n<tr><td><code>tally-1</code></td><td>2</td><td>3</td></tr>"
	if !strings.Contains(page, want) {
		t.Errorf("page with counts lacks %q", want)
	}
}
