package rbacfilter

import (
	"runtime"
	"sync"
	"weak"
)

// engines shares compiled configs between every decode of the process:
// the same RBAC config bytes, in any resource of any listener or server,
// give the same *Config for as long as a configuration holds it. Entries
// do not keep their configs alive; an entry is dropped once its config is
// garbage.
var engines = &configCache{m: map[string]weak.Pointer[Config]{}}

type configCache struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[Config] // by config bytes (received, or deterministic); guarded by mu
}

// lookup returns the live config for key, or nil.
func (c *configCache) lookup(key string) *Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key].Value()
}

// get returns the live config for key, or builds one. build runs without
// the lock held; two concurrent builds of one key may both run, and the
// first stored wins.
func (c *configCache) get(key string, build func() (*Config, error)) (*Config, error) {
	if p := c.lookup(key); p != nil {
		return p, nil
	}
	cfg, err := build()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.m[key].Value(); p != nil {
		return p, nil
	}
	c.store(key, cfg)
	return cfg, nil
}

// alias makes key another key of cfg, unless key already has a live
// config.
func (c *configCache) alias(key string, cfg *Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key].Value() == nil {
		c.store(key, cfg)
	}
}

// store enters cfg under key; c.mu is held.
func (c *configCache) store(key string, cfg *Config) {
	wp := weak.Make(cfg)
	c.m[key] = wp
	runtime.AddCleanup(cfg, c.drop, cleanupKey{key: key, wp: wp})
}

type cleanupKey struct {
	key string
	wp  weak.Pointer[Config]
}

// drop forgets a collected config, unless its key was taken over since.
func (c *configCache) drop(k cleanupKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[k.key] == k.wp {
		delete(c.m, k.key)
	}
}

// size returns the number of entries, for tests.
func (c *configCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
