package sink_test

import (
	"io"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	accesslogpb "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	filepb "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/proxyless-grpc/xds/internal/accesslog"
	"github.com/proxyless-grpc/xds/internal/accesslog/sink"
)

// defaultLog is a FileAccessLog at path with Envoy's default format.
func defaultLog(t testing.TB, path string) *accesslog.Config {
	t.Helper()
	a, err := anypb.New(&filepb.FileAccessLog{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := accesslog.Compile([]*accesslogpb.AccessLog{{ConfigType: &accesslogpb.AccessLog_TypedConfig{TypedConfig: a}}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// rpcRecord is a typical record: what the server fills per RPC.
func rpcRecord() *accesslog.Record {
	return &accesslog.Record{
		StartTime:           time.Now(),
		Duration:            3 * time.Millisecond,
		FullMethod:          "/helloworld.Greeter/SayHello",
		Authority:           "greeter.default.svc.cluster.local:50051",
		RequestHeaders:      map[string][]string{"user-agent": {"grpc-go/1.85.0"}, "x-request-id": {"cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2"}},
		ResponseCode:        200,
		HasGRPCStatus:       true,
		ResponseCodeDetails: accesslog.DetailsViaUpstream,
		BytesReceived:       12,
		BytesSent:           17,
		Remote:              netip.MustParseAddrPort("10.0.0.7:43210"),
		Local:               netip.MustParseAddrPort("10.0.0.5:50051"),
	}
}

// Log, on the RPC's path, allocates nothing.
func TestLogAllocs(t *testing.T) {
	o := sink.New(sink.Options{Stdout: io.Discard})
	defer closeOutputs(t, o)
	l := o.Logger(defaultLog(t, accesslog.Stdout))
	defer l.Close()
	r := rpcRecord()
	if n := testing.AllocsPerRun(1000, func() { l.Log(r) }); n != 0 {
		t.Errorf("Log allocates %v times, want 0", n)
	}
}

// The cost of Log per RPC: the filters and a hand-off to the output's
// buffer (the record is filled by the caller, not counted here). Enqueued:
// the writer is let to catch up (untimed) before the buffer fills, so
// every record is handed over; Dropped: the buffer is full, so every
// record is dropped and counted.
func BenchmarkLog(b *testing.B) {
	o := sink.New(sink.Options{Stdout: io.Discard})
	defer o.Close(b.Context())
	l := o.Logger(defaultLog(b, accesslog.Stdout))
	defer l.Close()
	r := rpcRecord()
	b.Run("Enqueued", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			l.Log(r)
			if n++; n == sink.DefaultBuffer/2 {
				b.StopTimer()
				o.Flush(b.Context())
				b.StartTimer()
				n = 0
			}
		}
	})
	w := newBlockingWriter()
	blocked := sink.New(sink.Options{Buffer: 1, OpenFile: func(string) (io.WriteCloser, error) { return w, nil }})
	bl := blocked.Logger(defaultLog(b, "/var/log/blocked.log"))
	bl.Log(r)
	<-w.entered
	bl.Log(r) // the buffer is full
	b.Run("Dropped", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bl.Log(r)
		}
	})
	close(w.release)
	bl.Close()
	blocked.Close(b.Context())
}

// The writer's cost per line, to a file: formatting with Envoy's default
// format and the batched writes, Log included (each batch of records is
// flushed before the next, so none is dropped).
func BenchmarkWriteLine(b *testing.B) {
	o := sink.New(sink.Options{})
	defer o.Close(b.Context())
	l := o.Logger(defaultLog(b, filepath.Join(b.TempDir(), "access.log")))
	defer l.Close()
	r := rpcRecord()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		l.Log(r)
		if n++; n == sink.DefaultBuffer {
			o.Flush(b.Context())
			n = 0
		}
	}
	o.Flush(b.Context())
}
