package admin

import (
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"

	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/proxyless-grpc/xds/internal/httpfilter"
	"github.com/proxyless-grpc/xds/internal/httpfilter/builtin"
	"github.com/proxyless-grpc/xds/internal/server/rpcpath"
	"github.com/proxyless-grpc/xds/internal/server/status"
	"github.com/proxyless-grpc/xds/internal/xdsclient"
	"github.com/proxyless-grpc/xds/internal/xdsresource"
)

// page is what the template renders: the status in words.
type page struct {
	Time     string
	NodeID   string
	Stopped  bool
	Servers  []serverView
	Listener []listenerView
}

type serverView struct {
	URI, State, LastError string
}

type listenerView struct {
	Addr, Name  string
	Serving     bool
	Mode        string
	Reason      string
	Since       string
	Resource    resourceView
	Chains      []chainView
	Drains      []drainView
	Counted     []countTable
	NoneApplied bool
	// TLSNotApplied is set when some chain asks for TLS that the server's
	// credentials (described) do not give.
	TLSNotApplied string
	// TLSRefused is set when some chain asks for TLS and the server
	// cannot tell its credentials (why): its connections are refused.
	TLSRefused string
}

// resourceView is an xDS resource as the client holds it.
type resourceView struct {
	Status, Meaning, Version, Updated string
	NACK                              *nackView
}

type nackView struct {
	Version, Reason, Time string
}

type chainView struct {
	Name       string
	Default    bool
	Match      []string
	Security   string
	SecurityOf string
	NoTLS      bool // the chain asks for TLS that is not applied, or refused
	Routes     routesView
	Filters    []filterView
	Live       int
	Draining   int
}

type routesView struct {
	Source   string        // where the routes come from
	Resource *resourceView // the RDS resource, if any
	Err      string        // why every RPC fails, if it does
	VHosts   []vhostView
	MoreVH   int
}

type filterView struct {
	Name, Type, Note string
}

// countTable is the counts of one kind of filter (httpfilter.Outcomes with
// a Title): a row per filter instance, a column per outcome.
type countTable struct {
	Title, None string
	Columns     []string
	Rows        []rpcpath.FilterCount
}

type drainView struct {
	Chain    string
	Conns    int
	Why      string
	Deadline string
}

// buildPage turns a status into words.
func buildPage(st *status.Server) *page {
	p := &page{Time: st.Time.UTC().Format(time.RFC3339), NodeID: st.NodeID, Stopped: st.Stopped}
	for _, s := range st.XDSServers {
		v := serverView{URI: s.URI}
		switch {
		case s.StreamUp:
			v.State = "connected (ADS stream up)"
		case s.Connected:
			v.State = "reconnecting (the last stream had received responses)"
		default:
			v.State = "not connected"
		}
		if s.LastError != nil {
			v.LastError = fmt.Sprintf("%v (%s)", s.LastError, ago(st.Time, s.LastErrorTime))
		}
		p.Servers = append(p.Servers, v)
	}
	for _, l := range st.Listeners {
		p.Listener = append(p.Listener, buildListener(st, l))
	}
	return p
}

func buildListener(st *status.Server, l status.Listener) listenerView {
	v := listenerView{Addr: l.Addr.String(), Name: l.Name, Serving: l.Mode == connectivity.ServingModeServing}
	switch l.Mode {
	case connectivity.ServingModeServing:
		v.Mode = "SERVING"
	case connectivity.ServingModeNotServing:
		v.Mode = "NOT SERVING"
	default:
		v.Mode = "STARTING (waiting for the Listener resource)"
	}
	if l.Err != nil {
		v.Reason = l.Err.Error()
	}
	if !l.Since.IsZero() {
		v.Since = ago(st.Time, l.Since)
	}
	v.Resource = resource(st, xdsresource.ListenerTypeURL, l.Name)

	var lis listenerpb.Listener
	if l.Applied != nil {
		_ = l.Applied.UnmarshalTo(&lis) // it was decoded once already
	} else {
		v.NoneApplied = true
	}
	counted := make(map[string]rpcpath.FilterCount)
	for _, c := range l.Counted {
		counted[c.Filter] = c
	}
	for i, c := range l.Chains {
		var src *listenerpb.FilterChain
		switch {
		case c.Chain.IsDefault:
			src = lis.GetDefaultFilterChain()
		case i < len(lis.GetFilterChains()):
			src = lis.GetFilterChains()[i]
		}
		cv := buildChain(st, c, src, counted)
		switch {
		case c.Chain.Security != nil && l.UnknownCreds != "":
			cv.NoTLS = true
			cv.Security = "REFUSED: " + cv.Security + " asked for, and the server cannot tell its credentials"
			v.TLSRefused = l.UnknownCreds
		case c.Chain.Security != nil && l.NonXDSCreds != "":
			cv.NoTLS = true
			cv.Security = "NOT APPLIED: " + cv.Security + " asked for, served with the server's credentials"
			v.TLSNotApplied = l.NonXDSCreds
		}
		v.Chains = append(v.Chains, cv)
		if c.Conns.Draining > 0 {
			v.Drains = append(v.Drains, drainView{Chain: cv.Name, Conns: c.Conns.Draining,
				Why: "rerouted by a Listener update", Deadline: deadline(st.Time, c.Conns.DrainDeadline)})
		}
	}
	retired := slices.Clone(l.Retired)
	slices.SortFunc(retired, func(a, b status.Chain) int { return strings.Compare(a.Chain.Name, b.Chain.Name) })
	for _, c := range retired {
		why := "its filter chain changed or was removed"
		if !v.Serving {
			why = "the listener stopped serving"
		}
		v.Drains = append(v.Drains, drainView{Chain: chainName(c.Chain.Name), Conns: c.Conns.Draining + c.Conns.Live,
			Why: why, Deadline: deadline(st.Time, c.Conns.DrainDeadline)})
	}
	v.Counted = countTables(l.Counted)
	return v
}

// countTables lays out counts as one table per kind of counting filter:
// every kind the server's registry knows, counted or not yet, then any
// other kind that counted, by Title.
func countTables(counts []rpcpath.FilterCount) []countTable {
	var kinds []*httpfilter.Outcomes
	for _, f := range builtin.Registry.Filters() {
		if cf, ok := f.(httpfilter.CountingFilter); ok && cf.Outcomes().Title != "" && !slices.Contains(kinds, cf.Outcomes()) {
			kinds = append(kinds, cf.Outcomes())
		}
	}
	for _, c := range counts {
		if !slices.Contains(kinds, c.Outcomes) {
			kinds = append(kinds, c.Outcomes)
		}
	}
	slices.SortFunc(kinds, func(a, b *httpfilter.Outcomes) int { return strings.Compare(a.Title, b.Title) })
	out := make([]countTable, 0, len(kinds))
	for _, k := range kinds {
		t := countTable{Title: k.Title, None: k.None}
		for _, v := range k.Values {
			t.Columns = append(t.Columns, capitalize(strings.ReplaceAll(v, "_", " ")))
		}
		for _, c := range counts {
			if c.Outcomes == k {
				t.Rows = append(t.Rows, c)
			}
		}
		out = append(out, t)
	}
	return out
}

// capitalize returns s with its first letter in upper case.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func buildChain(st *status.Server, c status.Chain, src *listenerpb.FilterChain, counted map[string]rpcpath.FilterCount) chainView {
	fc := c.Chain
	v := chainView{Name: chainName(fc.Name), Default: fc.IsDefault, Live: c.Conns.Live, Draining: c.Conns.Draining}
	if src != nil {
		v.Match = describeMatch(src.GetFilterChainMatch(), fc.IsDefault)
	} else {
		v.Match = []string{"(see the CSDS dump)"}
	}
	v.Security, v.SecurityOf = describeSecurity(fc.Security)

	var rc *routepb.RouteConfiguration
	if name := fc.HCM.RDSName; name != "" {
		v.Routes.Source = fmt.Sprintf("RouteConfiguration %q (RDS)", name)
		r := resource(st, xdsresource.RouteConfigTypeURL, name)
		v.Routes.Resource = &r
		if d, ok := st.Resources[status.ResourceKey{TypeURL: xdsresource.RouteConfigTypeURL, Name: name}]; ok && d.Raw != nil {
			rc = &routepb.RouteConfiguration{}
			if d.Raw.UnmarshalTo(rc) != nil {
				rc = nil
			}
		}
	} else {
		v.Routes.Source = "inline route_config"
		rc = hcmOf(src).GetRouteConfig()
		if rc != nil && rc.GetName() != "" {
			v.Routes.Source = fmt.Sprintf("inline route_config %q", rc.GetName())
		}
	}
	switch {
	case c.Routes == nil:
		v.Routes.Err = "no routes yet: RPCs fail with UNAVAILABLE"
	case c.Routes.Err() != nil:
		v.Routes.Err = c.Routes.Err().Error() + ": RPCs fail with UNAVAILABLE"
	}
	if rc != nil {
		v.Routes.VHosts, v.Routes.MoreVH = describeRoutes(rc)
	}

	for _, in := range fc.HCM.Filters {
		f := filterView{Name: in.Name, Type: filterType(in)}
		if d, ok := in.Filter.(httpfilter.Describer); ok {
			f.Note = d.Describe(in.Config)
		}
		if in.DisabledByDefault {
			f.Note = strings.TrimPrefix(f.Note+"; disabled unless a route enables it", "; ")
		}
		if n, ok := counted[in.Name]; ok {
			parts := make([]string, len(n.Counts))
			for i, c := range n.Counts {
				parts[i] = fmt.Sprintf("%d %s", c, strings.ReplaceAll(n.Outcomes.Values[i], "_", " "))
			}
			f.Note = strings.TrimPrefix(f.Note+"; "+strings.Join(parts, ", "), "; ")
		}
		v.Filters = append(v.Filters, f)
	}
	return v
}

// filterType is the short name of a filter's config type.
func filterType(in httpfilter.Instance) string {
	urls := in.Filter.ConfigTypeURLs()
	if len(urls) == 0 {
		return ""
	}
	u := urls[0]
	return u[strings.LastIndexByte(u, '/')+1:]
}

func chainName(name string) string {
	if name == "" {
		return "(unnamed)"
	}
	return fmt.Sprintf("%q", name)
}

// resource describes what the xDS client holds of a resource.
func resource(st *status.Server, typeURL, name string) resourceView {
	d, ok := st.Resources[status.ResourceKey{TypeURL: typeURL, Name: name}]
	if !ok {
		return resourceView{Status: "not watched"}
	}
	v := resourceView{Status: d.Status.String(), Meaning: statusMeaning(d.Status), Version: d.Version}
	if v.Version == "" {
		v.Version = "(none)"
	}
	if !d.LastUpdated.IsZero() {
		v.Updated = ago(st.Time, d.LastUpdated)
	}
	if e := d.Error; e != nil {
		v.NACK = &nackView{Version: e.Version, Reason: e.Reason, Time: ago(st.Time, e.Time)}
	}
	return v
}

// statusMeaning says what a CSDS resource status means for the server.
func statusMeaning(s xdsclient.ResourceStatus) string {
	switch s {
	case xdsclient.StatusACKed:
		return "accepted"
	case xdsclient.StatusNACKed:
		return "a later update was rejected (see the NACK); this version keeps serving"
	case xdsclient.StatusRequested:
		return "requested, not received yet"
	case xdsclient.StatusDoesNotExist:
		return "the control plane does not have it"
	case xdsclient.StatusTimeout:
		return "the control plane did not send it in time"
	case xdsclient.StatusReceivedError:
		return "the control plane sent an error for it"
	default:
		return ""
	}
}

// ago formats t, a time before now, for a person.
func ago(now, t time.Time) string {
	return fmt.Sprintf("%s, %s ago", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

// deadline formats a drain deadline.
func deadline(now, t time.Time) string {
	if t.IsZero() {
		return "no deadline yet (GOAWAY pending, or a graceful stop waiting for RPCs)"
	}
	return fmt.Sprintf("%s, in %s", t.UTC().Format(time.RFC3339), t.Sub(now).Round(time.Second))
}

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>xDS server status</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #1a1a1a; max-width: 80em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05em; margin-bottom: .3em; }
table { border-collapse: collapse; margin: .4em 0 1em; }
th, td { text-align: left; vertical-align: top; padding: .25em .7em; border: 1px solid #ddd; }
th { background: #f4f4f4; font-weight: 600; }
code { font-family: ui-monospace, monospace; }
.serving { color: #0a6b2d; font-weight: 700; }
.notserving { color: #a4000f; font-weight: 700; }
.nack { color: #a4000f; }
.muted { color: #666; }
ul { margin: 0; padding-left: 1.2em; }
</style>
</head>
<body>
<h1>xDS server status</h1>
<p>Node <code>{{.NodeID}}</code> · taken {{.Time}} · <a href="csds.json">CSDS dump (JSON)</a>{{if .Stopped}} · <span class="notserving">stopping</span>{{end}}</p>

<h2>Control plane</h2>
{{if .Servers}}<table>
<tr><th>Management server</th><th>State</th><th>Last stream error</th></tr>
{{range .Servers}}<tr><td><code>{{.URI}}</code></td><td>{{.State}}</td><td>{{if .LastError}}{{.LastError}}{{else}}<span class="muted">none</span>{{end}}</td></tr>
{{end}}</table>{{else}}<p class="muted">No connection to a management server.</p>{{end}}

{{range .Listener}}
<h2>Listener {{.Addr}} — <span class="{{if .Serving}}serving{{else}}notserving{{end}}">{{.Mode}}</span></h2>
<table>
<tr><th>Listener resource</th><td><code>{{.Name}}</code></td></tr>
<tr><th>Serving mode</th><td>{{.Mode}}{{if .Since}} since {{.Since}}{{end}}{{if .Reason}}<br>Reason: {{.Reason}}{{end}}</td></tr>
<tr><th>Version</th><td>{{.Resource.Version}} — {{.Resource.Status}}: {{.Resource.Meaning}}{{if .Resource.Updated}}; received {{.Resource.Updated}}{{end}}</td></tr>
<tr><th>Last NACK</th><td>{{with .Resource.NACK}}<span class="nack">version {{.Version}}, {{.Time}}: {{.Reason}}</span>{{else}}<span class="muted">none</span>{{end}}</td></tr>
</table>
{{if .NoneApplied}}<p class="muted">No Listener applied: connections are closed at once.</p>{{end}}
{{if .TLSRefused}}<p class="nack" id="tls-refused"><b>TLS connections refused.</b> The control plane asks for TLS on filter chains marked below, but the server cannot tell which transport credentials its options set ({{.TLSRefused}}): they might serve those chains in plaintext, so their connections are closed. Pass <code>grpc.Creds(xds.NewServerCredentials(...))</code> to <code>NewGRPCServer</code> as an option of its own.</p>{{end}}
{{if .TLSNotApplied}}<p class="nack" id="tls-not-applied"><b>TLS not applied.</b> The control plane asks for TLS on filter chains marked below, but the server's transport credentials are not xDS credentials ({{.TLSNotApplied}}): their connections are served with those credentials instead (gRFC A29). Pass <code>grpc.Creds(xds.NewServerCredentials(...))</code> to <code>NewGRPCServer</code>.</p>{{end}}
{{range .Chains}}
<h3>Filter chain {{.Name}}{{if .Default}} (default){{end}}</h3>
<table>
<tr><th>Matches</th><td><ul>{{range .Match}}<li>{{.}}</li>{{end}}</ul></td></tr>
<tr><th>Security</th><td{{if .NoTLS}} class="nack"{{end}}><b>{{.Security}}</b>: {{.SecurityOf}}</td></tr>
<tr><th>Routes</th><td>{{.Routes.Source}}{{with .Routes.Resource}}, version {{.Version}} — {{.Status}}: {{.Meaning}}{{with .NACK}}<br><span class="nack">Last NACK: version {{.Version}}, {{.Time}}: {{.Reason}}</span>{{end}}{{end}}
{{if .Routes.Err}}<br><span class="nack">{{.Routes.Err}}</span>{{end}}
{{range .Routes.VHosts}}<br>Virtual host <code>{{.Name}}</code>, domains {{.Domains}}:<ul>{{range .Routes}}<li>{{.}}</li>{{end}}{{if .More}}<li class="muted">… {{.More}} more route(s) in the CSDS dump</li>{{end}}</ul>{{end}}
{{if .Routes.MoreVH}}<span class="muted">… {{.Routes.MoreVH}} more virtual host(s) in the CSDS dump</span>{{end}}</td></tr>
<tr><th>HTTP filters</th><td><ol>{{range .Filters}}<li><code>{{.Name}}</code> <span class="muted">{{.Type}}</span>{{if .Note}} — {{.Note}}{{end}}</li>{{end}}</ol></td></tr>
<tr><th>Connections</th><td>{{.Live}} live, {{.Draining}} draining</td></tr>
</table>
{{end}}
<h3>Drains in progress</h3>
{{if .Drains}}<table>
<tr><th>Filter chain</th><th>Connections</th><th>Why</th><th>Closed by</th></tr>
{{range .Drains}}<tr><td>{{.Chain}}</td><td>{{.Conns}}</td><td>{{.Why}}</td><td>{{.Deadline}}</td></tr>
{{end}}</table>{{else}}<p class="muted">None.</p>{{end}}
{{range .Counted}}<h3>{{.Title}}</h3>
{{if .Rows}}<table>
<tr><th>HTTP filter</th>{{range .Columns}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><td><code>{{.Filter}}</code></td>{{range .Counts}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>{{else}}<p class="muted">{{.None}}</p>{{end}}
{{end}}
{{else}}
<h2>Listeners</h2>
<p class="muted">No listener has been passed to Serve.</p>
{{end}}
</body>
</html>
`
