//go:build tools

// Package tools names the two programs this module builds, so that `go mod tidy` records every module they
// need in go.sum.  The build tag keeps it out of any real build.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
