package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	csdspb "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxyless-grpc/xds"
	"github.com/proxyless-grpc/xds/admin"
	"github.com/proxyless-grpc/xds/internal/testutils"
	"github.com/proxyless-grpc/xds/internal/testutils/e2e"
)

// adminScenario is a server in the state the status page is meant to show
// at a glance: serving with two filter chains (one plaintext with RDS
// routes, one mTLS), a third chain removed by the last update whose
// connection is still draining, and a NACKed update after that. Strings the
// control plane chose carry markup, which the page must show as text.
type adminScenario struct {
	srv      *testServer
	lis      net.Listener
	page     string // the URL of the status page
	rdsName  string
	nackHint string // a word of the NACK's reason
}

const hostileRouteName = `<script>alert("x")</script>`

func startAdminScenario(ctx context.Context, t *testing.T) *adminScenario {
	t.Helper()
	pki := newTestPKI(t)
	env := newTLSTestEnv(t, pki, time.Hour)
	s := env.newServer(t, xdsCreds(t), xds.DrainGraceTime(time.Hour))
	lis, _ := listen(t, "127.0.0.1")
	s.serveOn(lis)

	mux := http.NewServeMux()
	mux.Handle("/xds/", http.StripPrefix("/xds", admin.NewStatusHandler(s.GRPCServer)))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	const rds = "routes-<b>plain</b>"
	rc := routeConfig(rds, []*routepb.Route{
		{Name: hostileRouteName, Match: prefixMatch("/grpc.testing.TestService/"), Action: &routepb.Route_NonForwardingAction{}},
	})
	rc.VirtualHosts[0].Routes = append(rc.VirtualHosts[0].Routes, clientRoute(pathMatch("/other.Service/Method")))
	denyMallory := rbacRules(rbacconfigpb.RBAC_DENY, map[string]*rbacconfigpb.Policy{
		"no-mallory": {Permissions: []*rbacconfigpb.Permission{anyPermission()}, Principals: []*rbacconfigpb.Principal{headerPrincipal("x-user", "mallory")}},
	})
	plain := chainSpec{name: "plain", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.1/32")}}, rds: rds,
		filters: []*hcmpb.HttpFilter{{Name: "rbac-deny", ConfigType: &hcmpb.HttpFilter_TypedConfig{TypedConfig: anyOf(t, denyMallory)}}}}
	old := chainSpec{name: "old", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.3/32")}}}
	mtls := chainSpec{name: "mtls", match: &listenerpb.FilterChainMatch{SourcePrefixRanges: []*corepb.CidrRange{cidr("127.0.0.2/32")}}}

	env.update(ctx, t, []*listenerpb.Listener{testListener(lis.Addr(), []chainSpec{plain, old}, nil)}, []*routepb.RouteConfiguration{rc})
	s.modes.wait(ctx, t, lis.Addr(), connectivity.ServingModeServing)
	st := newClient(t, lis.Addr(), "127.0.0.3", 0).startStream(ctx, t)
	t.Cleanup(func() { st.cancel() })
	plainClient := newClient(t, lis.Addr(), "127.0.0.1", 0)
	if code := plainClient.emptyCall(ctx); code != codes.OK {
		t.Fatalf("EmptyCall on chain plain: %v, want OK", code)
	}
	if code := plainClient.emptyCall(metadata.AppendToOutgoingContext(ctx, "x-user", "mallory")); code != codes.PermissionDenied {
		t.Fatalf("EmptyCall as mallory on chain plain: %v, want PermissionDenied", code)
	}

	// v2: "old" goes away (its connection drains for an hour), "mtls" is
	// added.
	v2 := withTransportSocket(t, testListener(lis.Addr(), []chainSpec{plain, mtls}, nil), "mtls", downstreamTLS(true, true))
	env.update(ctx, t, []*listenerpb.Listener{v2}, []*routepb.RouteConfiguration{rc})
	waitForText(ctx, t, hs.URL+"/xds/", `Filter chain "mtls"`)

	// v3 is NACKed: require_sni cannot be honoured (gRFC A29).
	bad := withTransportSocket(t, testListener(lis.Addr(), []chainSpec{plain, mtls}, nil), "mtls", downstreamTLS(true, true))
	for _, fc := range bad.FilterChains {
		if fc.GetName() == "mtls" {
			d := downstreamTLS(true, true)
			d.RequireSni = wrapperspb.Bool(true)
			withTransportSocket(t, bad, "mtls", d)
		}
	}
	env.update(ctx, t, []*listenerpb.Listener{bad}, []*routepb.RouteConfiguration{rc})
	waitForText(ctx, t, hs.URL+"/xds/", "require_sni")
	return &adminScenario{srv: s, lis: lis, page: hs.URL + "/xds/", rdsName: rds, nackHint: "require_sni"}
}

// fetch GETs url and returns the response and its body.
func fetch(ctx context.Context, t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp, string(b)
}

var (
	blockTagRE = regexp.MustCompile(`(?i)</?(?:tr|td|th|li|h[1-6]|p|br|table|ul|ol|div|head|title|style)\b[^>]*>`)
	tagRE      = regexp.MustCompile(`<[^>]*>`)
	styleRE    = regexp.MustCompile(`(?is)<style\b.*?</style>`)
	spaceRE    = regexp.MustCompile(`[ \t]*\n[ \t\n]*`)
)

// pageText is the text a person reads on an HTML page: one line per block
// (table cell, list item, heading, paragraph), inline markup removed,
// entities decoded.
func pageText(body string) string {
	body = styleRE.ReplaceAllString(body, "")
	body = tagRE.ReplaceAllString(blockTagRE.ReplaceAllString(body, "\n"), "")
	return strings.TrimSpace(spaceRE.ReplaceAllString(html.UnescapeString(body), "\n"))
}

// waitForText polls the page until its text contains want.
func waitForText(ctx context.Context, t *testing.T, url, want string) string {
	t.Helper()
	var text string
	testutils.WaitFor(ctx, t, fmt.Sprintf("the status page to show %q", want), func() error {
		_, body := fetch(ctx, t, url)
		if text = pageText(body); !strings.Contains(text, want) {
			return fmt.Errorf("last text:\n%s", text)
		}
		return nil
	})
	return text
}

// checkPageText checks what a person reads on the page of the scenario.
func checkPageText(t *testing.T, sc *adminScenario, text string) {
	t.Helper()
	for _, want := range []string{
		"Listener " + sc.lis.Addr().String() + " — SERVING",
		"Listener resource\n" + e2e.ServerListenerName("127.0.0.1", uint32(sc.lis.Addr().(*net.TCPAddr).Port)),
		"Version\n2 — NACKED: a later update was rejected (see the NACK); this version keeps serving",
		"Last NACK\nversion 3, ",
		sc.nackHint,
		// The chains, in the Listener's order, with their match, security,
		// routes and filters.
		`Filter chain "plain"`,
		"source in 127.0.0.1/32",
		"plaintext: no transport_socket: the server's fallback credentials apply",
		`RouteConfiguration "` + sc.rdsName + `" (RDS), version 3 — ACKED: accepted`,
		strconv.Quote(hostileRouteName) + `: prefix "/grpc.testing.TestService/" → served`,
		`path "/other.Service/Method" → route: fails with UNAVAILABLE on a server`,
		"rbac-deny envoy.extensions.filters.http.rbac.v3.RBAC — 1 allowed, 1 denied",
		"router envoy.extensions.filters.http.router.v3.Router",
		`Filter chain "mtls"`,
		"source in 127.0.0.2/32",
		`mTLS: server certificate from provider instance "` + instServer + `"`,
		`client certificates verified with roots from provider instance "` + instRoots + `", required`,
		// The drain of the removed chain, with its deadline an hour away.
		"Drains in progress",
		"\"old\"\n1\nits filter chain changed or was removed",
		"1 live, 0 draining", // plain
		"0 live, 0 draining", // mtls
		"RBAC decisions\nHTTP filter\nAllowed\nDenied\nrbac-deny\n1\n1",
		"Control plane",
		"connected (ADS stream up)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the status page does not show %q; its text:\n%s", want, text)
		}
	}
	if !regexp.MustCompile(`in (59m5\d|1h0m0)s`).MatchString(text) {
		t.Errorf("the status page does not show the drain deadline about an hour away; its text:\n%s", text)
	}
	if strings.Contains(text, "PRIVATE KEY") {
		t.Errorf("the status page shows key material:\n%s", text)
	}
}

// TestAdminPage_HTTP reads the status page and the CSDS dump it links to
// with a plain HTTP client.
func TestAdminPage_HTTP(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	sc := startAdminScenario(ctx, t)

	resp, body := fetch(ctx, t, sc.page)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET %s: %s, Content-Type %q; want 200 and HTML", sc.page, resp.Status, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q, want one that loads nothing", csp)
	}
	// Markup from the control plane is text on the page, never markup.
	if strings.Contains(strings.ToLower(body), "<script") || strings.Contains(body, "<b>plain</b>") {
		t.Errorf("the page carries markup from the control plane unescaped:\n%s", body)
	}
	if !strings.Contains(body, `href="csds.json"`) {
		t.Errorf("the page does not link to csds.json")
	}
	checkPageText(t, sc, pageText(body))

	// The CSDS dump: protobuf JSON of a ClientStatusResponse that has this
	// server's Listener, ACKed at version 2 with version 3's NACK.
	resp, body = fetch(ctx, t, strings.TrimSuffix(sc.page, "/")+"/csds.json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET csds.json: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	var csds csdspb.ClientStatusResponse
	if err := protojson.Unmarshal([]byte(body), &csds); err != nil {
		t.Fatalf("csds.json is not a ClientStatusResponse: %v", err)
	}
	found := false
	for _, cfg := range csds.GetConfig() {
		for _, g := range cfg.GetGenericXdsConfigs() {
			if strings.HasSuffix(g.GetTypeUrl(), "Listener") && strings.Contains(g.GetName(), sc.lis.Addr().String()) {
				found = true
				if g.GetVersionInfo() != "2" || g.GetErrorState().GetVersionInfo() != "3" || !strings.Contains(g.GetErrorState().GetDetails(), sc.nackHint) {
					t.Errorf("csds.json has the Listener at version %q with error state %v; want version 2 and version 3's NACK", g.GetVersionInfo(), g.GetErrorState())
				}
			}
		}
	}
	if !found {
		t.Errorf("csds.json has no Listener for %v:\n%s", sc.lis.Addr(), body)
	}
	if strings.Contains(body, "PRIVATE KEY") {
		t.Errorf("csds.json holds key material")
	}

	// Read-only, and nothing else is served.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sc.page, strings.NewReader("x"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST to the page: %v %v, want 405", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, _ := fetch(ctx, t, sc.page+"secrets"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET an unknown path: %s, want 404", resp.Status)
	}
	var anyJSON any
	if err := json.Unmarshal([]byte(body), &anyJSON); err != nil {
		t.Errorf("csds.json is not JSON: %v", err)
	}
}

// chromiumPath returns the path of a Chromium binary, or "".
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestAdminPage_Browser loads the status page in headless Chromium, as a
// person would, and checks the text it renders (from its DOM) and that it
// takes a screenshot of it. Without Chromium it skips, unless
// XDS_REQUIRE_BROWSER is set (CI sets it, after installing Debian's
// chromium package).
func TestAdminPage_Browser(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath()
	if chromium == "" {
		if os.Getenv("XDS_REQUIRE_BROWSER") != "" {
			t.Fatal("Chromium is not installed and XDS_REQUIRE_BROWSER is set")
		}
		t.Skip("Chromium is not installed (Debian: apt-get install chromium); skipping the browser test of the status page")
	}
	ctx := testContext(t)
	sc := startAdminScenario(ctx, t)

	dir := t.TempDir()
	run := func(args ...string) []byte {
		t.Helper()
		// The browser gets its own timeout: its start-up is slower than the
		// rest of a test, but bounded.
		bctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--no-first-run", "--disable-extensions", "--user-data-dir=" + filepath.Join(dir, "profile")}, args...)
		cmd := exec.CommandContext(bctx, chromium, all...)
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("%s %v: %v\n%s", chromium, args, err, stderr)
		}
		return out
	}
	dom := run("--dump-dom", sc.page)
	text := pageText(string(dom))
	checkPageText(t, sc, text)
	if strings.Contains(strings.ToLower(string(dom)), "<script") {
		t.Errorf("the rendered DOM has a script element:\n%s", dom)
	}

	shot := filepath.Join(dir, "status.png")
	run("--screenshot="+shot, "--window-size=1280,1600", "--hide-scrollbars", sc.page)
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("Chromium wrote no screenshot: %v", err)
	}
	if len(b) < 10_000 || string(b[1:4]) != "PNG" {
		t.Errorf("the screenshot is %d bytes, not a page's PNG", len(b))
	}
	if d := os.Getenv("XDS_ADMIN_SCREENSHOT_DIR"); d != "" {
		if err := os.WriteFile(filepath.Join(d, "status.png"), b, 0o644); err != nil {
			t.Errorf("saving the screenshot: %v", err)
		}
		if err := os.WriteFile(filepath.Join(d, "status.txt"), []byte(text), 0o644); err != nil {
			t.Errorf("saving the page text: %v", err)
		}
	}
}
