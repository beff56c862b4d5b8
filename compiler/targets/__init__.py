"""One module per consumer of the compiled tree: the NVIDIA device plugin, the GPU Operator, mig-parted, HAMi and
the admission webhook's manifests. Each renders plain Kubernetes objects from a resolved policy and writes nothing."""
