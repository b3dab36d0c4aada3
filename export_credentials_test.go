package xds

import "github.com/proxyless-grpc/xds/bootstrap"

// CertProviderRefs returns how many filter chains in service (chainServers)
// hold the certificate provider of cfg; 0 when it is not running.
func CertProviderRefs(cfg bootstrap.FileWatcherConfig) int { return certStore.Refs(cfg) }
