package testutils

import (
	"encoding/json"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcbootstrap "google.golang.org/grpc/xds/bootstrap"
)

// GatedCreds are channel credentials registered with grpc-go's
// google.golang.org/grpc/xds/bootstrap registry, as a program's own type
// would be, whose Build blocks while the test holds them: slow credentials
// (a metadata server that takes seconds to answer) on demand, which no real
// credentials give a test. Build returns an insecure bundle.
type GatedCreds struct {
	name string

	mu      sync.Mutex
	gate    chan struct{} // guarded by mu; nil: Build returns at once
	entered chan struct{} // guarded by mu; gets a value for each Build that blocks
}

// RegisterGatedCreds registers GatedCreds under name. Call it before any
// test runs (the registry is a plain map), e.g. in a package variable's
// initializer.
func RegisterGatedCreds(name string) *GatedCreds {
	g := &GatedCreds{name: name}
	grpcbootstrap.RegisterChannelCredentials(g)
	return g
}

// Name implements grpcbootstrap.ChannelCredentials.
func (g *GatedCreds) Name() string { return g.name }

// Build implements grpcbootstrap.ChannelCredentials: while the credentials
// are held, it reports that it runs on the channel Hold returned and waits
// for the release.
func (g *GatedCreds) Build(json.RawMessage) (credentials.Bundle, func(), error) {
	g.mu.Lock()
	gate, entered := g.gate, g.entered
	g.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	return insecure.NewBundle(), func() {}, nil
}

// Hold makes the next Builds block until release is called, at the latest
// when the test ends: cleanups run last first, so a test whose own cleanups
// wait for a Build (closing an xDS client) calls release itself before
// them. entered gets a value as each Build starts to block.
func (g *GatedCreds) Hold(t interface{ Cleanup(func()) }) (entered <-chan struct{}, release func()) {
	gate, ent := make(chan struct{}), make(chan struct{}, 16)
	g.mu.Lock()
	g.gate, g.entered = gate, ent
	g.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			g.mu.Lock()
			g.gate, g.entered = nil, nil
			g.mu.Unlock()
			close(gate)
		})
	}
	t.Cleanup(release)
	return ent, release
}
