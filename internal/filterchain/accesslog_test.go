package filterchain_test

import (
	"errors"
	"testing"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	streampb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/proxyless-grpc/xds/internal/filterchain"
)

// stdoutLog is an access log to stdout with the text format f.
func stdoutLog(f string) *accesslogpb.AccessLog {
	return &accesslogpb.AccessLog{Name: "stdout", ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: mustAny(&streampb.StdoutAccessLog{
		AccessLogFormat: &streampb.StdoutAccessLog_LogFormat{LogFormat: &corepb.SubstitutionFormatString{
			Format: &corepb.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corepb.DataSource{
				Specifier: &corepb.DataSource_InlineString{InlineString: f}}}}}})}}
}

// chainWithLog is a chain whose HCM (with RDS name routes) logs with logs.
func chainWithLog(name string, port uint32, routes string, logs ...*accesslogpb.AccessLog) *listenerpb.FilterChain {
	h := rdsHCM(routes)
	h.AccessLog = logs
	return &listenerpb.FilterChain{Name: name, FilterChainMatch: &listenerpb.FilterChainMatch{SourcePorts: []uint32{port}},
		Filters: []*listenerpb.Filter{hcmFilter(h)}}
}

// The HttpConnectionManager's access_log is compiled into its AccessLog;
// none is nil.
func TestAccessLogCompiled(t *testing.T) {
	tbl := mustCompile(t, newListener(chainWithLog("a", 1, "routes", stdoutLog("%PROTOCOL%\n"), stdoutLog("%DURATION%\n")), chain("b", &listenerpb.FilterChainMatch{SourcePorts: []uint32{2}})))
	a, b := tbl.Chains()[0], tbl.Chains()[1]
	if n := len(a.HCM.AccessLog.Loggers()); n != 2 {
		t.Errorf("chain a has %d loggers, want 2", n)
	}
	if b.HCM.AccessLog != nil {
		t.Errorf("chain b has access log %v, want none", b.HCM.AccessLog)
	}
}

// An invalid access log NACKs the Listener, naming the chain and the field
// from the network filter down.
func TestAccessLogInvalid(t *testing.T) {
	_, err := filterchain.Compile(withHCM(func(h *hcmpb.HttpConnectionManager) {
		h.AccessLog = []*accesslogpb.AccessLog{stdoutLog("ok\n"), stdoutLog("%FOO%")}
	}), filterchain.Options{})
	var ve *filterchain.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Compile: %v, want a ValidationError", err)
	}
	const want = `filterchain: filter_chains[0] "a": filters[0].typed_config.access_log[1].typed_config.log_format.text_format_source.inline_string: unknown command operator %FOO%`
	if err.Error() != want {
		t.Errorf("Compile: %q, want %q", err, want)
	}
}

// Identical access logs are compiled once: chains whose
// HttpConnectionManagers differ (here by their routes) share it, and so do
// the chains of the Listener's next version, reused or new.
func TestAccessLogCompiledOnce(t *testing.T) {
	v1 := newListener(chainWithLog("a", 1, "r1", stdoutLog("%PROTOCOL%\n")), chainWithLog("b", 2, "r2", stdoutLog("%PROTOCOL%\n")),
		chainWithLog("c", 3, "r3", stdoutLog("%DURATION%\n")))
	t1, err := compileRaw(t, v1, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := t1.Chains()[0], t1.Chains()[1], t1.Chains()[2]
	if a.HCM == b.HCM || a.HCM.AccessLog != b.HCM.AccessLog {
		t.Errorf("chains of different HCMs with one access log: HCMs shared %v, access logs shared %v; want false, true", a.HCM == b.HCM, a.HCM.AccessLog == b.HCM.AccessLog)
	}
	if a.HCM.AccessLog == c.HCM.AccessLog {
		t.Errorf("different access logs shared")
	}
	// v2 keeps a, and adds d, whose HCM is new but logs as a does.
	v2 := newListener(chainWithLog("a", 1, "r1", stdoutLog("%PROTOCOL%\n")), chainWithLog("d", 4, "r4", stdoutLog("%PROTOCOL%\n")))
	t2, err := compileRaw(t, v2, t1)
	if err != nil {
		t.Fatal(err)
	}
	if got := t2.Chains()[1].HCM.AccessLog; got != a.HCM.AccessLog {
		t.Errorf("a new chain of the next version compiled its access log again")
	}
}
