# The interop test's policy, for Open Policy Agent's Envoy plugin
# (opa-envoy-plugin), queried at data.envoy.authz.result.
#
# gRPC's ext_authz filter (gRFC A92) sends the request's headers only as
# attributes.request.http.header_map, never the headers map. opa-envoy-plugin
# turns the CheckRequest into input with protobuf's JSON field names and bytes
# as base64 strings, so each header is at
#   input.attributes.request.http.headerMap.headers[_]
# as {"key": "x-user", "rawValue": "<base64 of the value>"}
# (input.attributes.request.http.headers is absent). opa_input_test.go pins
# that shape.
package envoy.authz

# The paths anyone may call.
allowed_paths := {
	"/grpc.testing.TestService/UnaryCall",
	"/grpc.health.v1.Health/Check",
}

# The request's headers, by name, decoded; a name that comes more than once
# gets its values joined with commas.
request_headers[name] := concat(",", values) if {
	some h in input.attributes.request.http.headerMap.headers
	name := lower(h.key)
	values := [base64.decode(g.rawValue) |
		some g in input.attributes.request.http.headerMap.headers
		lower(g.key) == name
	]
}

user := object.get(request_headers, "x-user", "anonymous")

banned if user == "mallory"

# A user refused with headers gRPC never sends (a grpc- header claiming
# success, a name with a space): the filter drops them, and the denial
# stands, with failure_mode_allow too.
refused_with_bad_headers if user == "eve"

out_of_quota if request_headers["x-quota"] == "exhausted"

# A path the policy does not list: Envoy's default denial (403, which gRPC
# maps to PERMISSION_DENIED).
default result := {
	"allowed": false,
	"http_status": 403,
	"body": "opa: path not allowed",
	"headers": {"x-ext-authz-reason": "path"},
}

# A banned user: 401, which gRPC maps to UNAUTHENTICATED, whatever the path.
result := {
	"allowed": false,
	"http_status": 401,
	"body": "opa: user mallory is banned",
	"headers": {"x-ext-authz-reason": "banned-user", "www-authenticate": "Bearer realm=\"interop\""},
} if banned

# No quota left: 429, which gRPC maps to UNAVAILABLE.
result := {
	"allowed": false,
	"http_status": 429,
	"body": "opa: quota exhausted",
	"headers": {"x-ext-authz-reason": "quota", "retry-after": "1"},
} if {
	not banned
	not refused_with_bad_headers
	out_of_quota
}

result := {
	"allowed": false,
	"http_status": 403,
	"body": "opa: eve is refused",
	"headers": {"x-ext-authz-reason": "eve", "grpc-status": "0", "bad header": "x"},
} if {
	not banned
	refused_with_bad_headers
}

# Allowed: the plugin turns headers into ok_response.headers, which the filter
# adds to the request the handler sees.
result := {
	"allowed": true,
	"headers": {"x-opa-user": user, "x-opa-path": input.attributes.request.http.path},
	"response_headers_to_add": {"x-opa-decision": "allowed"},
} if {
	not banned
	not refused_with_bad_headers
	not out_of_quota
	allowed_paths[input.attributes.request.http.path]
}

# The decision at data.envoy.authz.echo allows everything and hands the
# whole input back as dynamic_metadata, for the test that pins its shape.
echo := {"allowed": true, "dynamic_metadata": {"input": input}}

# The decision at data.envoy.authz.echo_header allows everything and hands
# the whole input to the handler, as JSON in base64url in the request header
# x-opa-input, for the test that checks what the library's filter really
# sends.
echo_header := {"allowed": true, "headers": {"x-opa-input": base64url.encode(json.marshal(input))}}
