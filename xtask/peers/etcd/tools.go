//go:build tools

// The packages `cargo xtask peers` builds from this module.
package peers

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "go.etcd.io/etcd/etcdctl/v3"
)
