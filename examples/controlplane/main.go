// Command controlplane is a small xDS management server: it serves the
// Listener and RouteConfiguration resources of a JSON file over ADS, and
// serves them again, as a new version, each time the file changes. Editing
// the file drives every xDS server connected to it (an xds.GRPCServer, or
// any gRPC xDS server).
//
//	go run ./examples/controlplane -config examples/controlplane/resources.json -addr 127.0.0.1:18000
//
// A file that does not parse is reported and ignored: the resources of the
// last good version keep being served. See README.md for the file format.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// config is what run needs; main fills it from the command line.
type config struct {
	path string        // the resources file
	addr string        // where to serve ADS
	poll time.Duration // how often to look at the file
	log  *log.Logger
	// listening, if set, is called with the ADS address once it accepts
	// connections (tests listen on port 0).
	listening func(net.Addr)
}

func main() {
	cfg := config{poll: 500 * time.Millisecond, log: log.New(os.Stderr, "controlplane: ", log.LstdFlags|log.Lmicroseconds)}
	flag.StringVar(&cfg.path, "config", "examples/controlplane/resources.json", "the `file` of Listener and RouteConfiguration resources (JSON)")
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:18000", "the `address` to serve ADS on")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		cfg.log.Print(err)
		os.Exit(1)
	}
}

// run serves the resources of cfg.path over ADS on cfg.addr, reloading them
// when the file changes, until ctx is done. It fails at once if the file
// cannot be loaded: there is no last good version to fall back on yet.
func run(ctx context.Context, cfg config) error {
	// Look at the file before reading it: a change made while it is read
	// is seen by the next look.
	w := &fileWatcher{path: cfg.path}
	w.changed()
	res, err := loadResources(cfg.path)
	if err != nil {
		return err
	}
	store := newResourceStore()
	logPush(cfg.log, "loaded", cfg.path, store.version+1, res)
	store.push(res)

	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := newADSServer(ctx, store, cfg.log)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	cfg.log.Printf("serving ADS on %s; watching %s", lis.Addr(), cfg.path)
	if cfg.listening != nil {
		cfg.listening(lis.Addr())
	}

	if cfg.poll <= 0 {
		cfg.poll = 500 * time.Millisecond
	}
	ticker := time.NewTicker(cfg.poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			cancel() // ends the ADS streams
			srv.Stop()
			<-served
			cfg.log.Print("stopped")
			return nil
		case err := <-served:
			srv.Stop()
			return fmt.Errorf("ADS server: %w", err)
		case <-ticker.C:
		}
		if changed, err := w.changed(); err != nil {
			cfg.log.Printf("cannot read %s, still serving version %d: %v", cfg.path, store.version, err)
			continue
		} else if !changed {
			continue
		}
		res, err := loadResources(cfg.path)
		if err != nil {
			cfg.log.Printf("reload REJECTED, still serving version %d: %v", store.version, err)
			continue
		}
		// Logged first: the clients' ACKs of the version follow.
		logPush(cfg.log, "reloaded", cfg.path, store.version+1, res)
		store.push(res)
	}
}

func logPush(logger *log.Logger, what, path string, version int, r *resources) {
	logger.Printf("%s %s as version %d: listeners %q, routes %q", what, path, version, names(r.listeners), names(r.routes))
	for _, m := range r.missingRoutes() {
		logger.Printf("warning: %s", m)
	}
}

// fileWatcher tells when a file has changed, by its size and modification
// time: a poll, with no dependency and no platform-specific code.
type fileWatcher struct {
	path    string
	size    int64
	modTime time.Time
	missing bool // the last look found no file
}

// changed reports whether the file looks different since the last call. If
// the file cannot be found, it returns the error the first time only; the
// file counts as changed when it is back.
func (w *fileWatcher) changed() (bool, error) {
	fi, err := os.Stat(w.path)
	if err != nil {
		if w.missing {
			return false, nil
		}
		w.missing = true
		return false, err
	}
	if !w.missing && fi.Size() == w.size && fi.ModTime().Equal(w.modTime) {
		return false, nil
	}
	w.missing, w.size, w.modTime = false, fi.Size(), fi.ModTime()
	return true, nil
}
