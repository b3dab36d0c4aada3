package testcerts

// NameCheck is one case of a test that a client checks a TLS server's
// name as grpc-go's TLS credentials do: the certificate the server
// presents, the host the client reaches it by, and whether the client
// accepts it.
type NameCheck struct {
	Name string
	Leaf LeafOptions
	// Host is the host of the client's target: "127.0.0.1" when empty.
	Host   string
	Accept bool
}

// IPNameChecks are the cases of a server the client reaches as 127.0.0.1,
// whose certificates name it name: one with the IP SAN 127.0.0.1
// (accepted), one with another IP SAN, and one with a DNS SAN only and
// 127.0.0.1 as its common name (both refused: an IP literal is checked
// against the IP SANs, never against the common name or a DNS SAN).
func IPNameChecks(name string) []NameCheck {
	return []NameCheck{
		{Name: "IP SAN of the target", Leaf: LeafOptions{CommonName: name, IPs: []string{"127.0.0.1"}}, Accept: true},
		{Name: "other IP SAN", Leaf: LeafOptions{CommonName: name, IPs: []string{"127.0.0.2"}}},
		{Name: "DNS SAN only", Leaf: LeafOptions{CommonName: "127.0.0.1", DNSNames: []string{name + ".example.com"}}},
	}
}
