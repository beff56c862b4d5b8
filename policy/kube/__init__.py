"""Kubernetes vocabulary the spec and the admission engine both speak: quantities, label selectors, field paths,
node affinity, tolerations and taints."""
