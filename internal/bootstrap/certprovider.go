package bootstrap

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/credentials/tls/certprovider"
)

// parsePluginConfig validates the config of p, an instance of a plugin
// other than file_watcher, at path: the builder registered under the
// plugin's name in grpc-go's certprovider registry parses it (as grpc-go
// does when it parses its own bootstrap), and p keeps the result for
// Buildable. A plugin that no builder is registered for is not an error
// here: the bootstrap may serve other processes that have it, and a
// Listener that names its instance is NACKed.
func parsePluginConfig(path string, p *CertProviderConfig) error {
	bc, err := certprovider.ParseConfig(p.PluginName, json.RawMessage(p.Config))
	switch {
	case err != nil && notRegistered(p.PluginName, err):
		return nil
	case err != nil:
		return fieldError(path, fmt.Errorf("%w: certificate provider plugin %q refused its config: %w", ErrInvalidValue, p.PluginName, err))
	case bc == nil:
		return fieldError(path, fmt.Errorf("%w: certificate provider plugin %q parsed its config to nothing", ErrInvalidValue, p.PluginName))
	}
	p.buildable = bc
	return nil
}

// notRegistered reports whether err, from certprovider.ParseConfig(name,
// ...), says that no builder is registered for name. grpc-go has no public
// lookup of its registry and no typed error for this case, so this is the
// one place that reads the message ParseConfig (grpc-go 1.85) returns then,
// as a whole; TestNotRegisteredCanary fails if a grpc-go version changes it.
func notRegistered(name string, err error) bool {
	return err.Error() == fmt.Sprintf("no certificate provider builder found for %q", name)
}
