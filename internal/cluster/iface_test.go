package cluster_test

import (
	"github.com/toc-dev/toc/internal/cluster"
	"github.com/toc-dev/toc/internal/engine"
)

// The two packages meet only through interfaces: each side's declaration
// is checked here, where importing both costs nothing.
var (
	_ engine.Index   = (*cluster.Node)(nil)
	_ engine.Limiter = (*cluster.RateLimiter)(nil)
	_ cluster.Engine = (*engine.ClusterSide)(nil)
)
