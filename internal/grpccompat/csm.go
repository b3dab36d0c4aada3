package grpccompat

import "reflect"

// The mesh metrics (internal/meshmetrics) must not answer the peer metadata
// header a second time when grpc-go's CSM observability plugin answers it:
// grpc-go offers no way to ask, so CSMAnswers recognises the plugin's
// stream wrappers by their package, type and field names (grpc-go v1.85).
// A grpc-go release that renames them makes both answer; the canary is
// examples/greeter's TestCSMServer, which runs the real plugin (its module,
// google.golang.org/grpc/stats/opentelemetry, is not this module's
// dependency).

// csmPackage is where grpc-go's OpenTelemetry plugin wraps the streams of
// a server it records on. With the CSM plugin option (csm.EnableObservability)
// the wrapper carries a metadata exchange header it adds on every RPC; a
// second value of the header, ours, would make its clients refuse both. The
// examples/greeter tests check this against the real plugin, with and
// without CSM.
const csmPackage = "google.golang.org/grpc/stats/opentelemetry"

// CSMAnswers reports whether x is a stream that grpc-go's CSM plugin
// wrapped to add its metadata exchange header: one of the plugin's
// wrappers, whose header is not empty (without the CSM plugin option the
// plain OpenTelemetry plugin uses the same wrappers, with none).
func CSMAnswers(x any) bool {
	if x == nil {
		return false
	}
	v := reflect.ValueOf(x)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	v = v.Elem()
	t := v.Type()
	if t.Kind() != reflect.Struct || t.PkgPath() != csmPackage || (t.Name() != "attachLabelsTransportStream" && t.Name() != "attachLabelsStream") {
		return false
	}
	f := v.FieldByName("metadataExchangeLabels")
	return f.IsValid() && f.Kind() == reflect.Map && f.Len() > 0
}
