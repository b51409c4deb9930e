//go:build tools

// The packages `cargo xtask peers` builds from this module.
package peers

import (
	_ "sigs.k8s.io/cri-tools/cmd/critest"
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
