package httpfilter

import "github.com/proxyless-grpc/xds/internal/typedconfig"

// adapter is a registered Filter as the server's framework
// (internal/httpfilter) sees it: never terminal, configs handed over as
// RawConfig, Needs forwarded.
type adapter struct{ f Filter }

func (a adapter) ConfigTypeURLs() []string   { return a.f.ConfigTypeURLs() }
func (a adapter) OverrideTypeURLs() []string { return a.f.OverrideTypeURLs() }
func (a adapter) IsTerminal() bool           { return false }

func (a adapter) ParseConfig(raw typedconfig.Config) (Config, error) {
	return a.f.ParseConfig(RawConfig{raw})
}

func (a adapter) ParseOverride(raw typedconfig.Config) (Config, error) {
	return a.f.ParseOverride(RawConfig{raw})
}

func (a adapter) BuildStep(instance string, config, override Config) (Step, error) {
	return a.f.BuildStep(instance, config, override)
}

// Needs reports what the filter needs, if it says (see Needs).
func (a adapter) Needs() Needs {
	if n, ok := a.f.(interface{ Needs() Needs }); ok {
		return n.Needs()
	}
	return Needs{}
}
