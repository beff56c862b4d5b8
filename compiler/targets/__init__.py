"""One module per consumer of the compiled tree: the NVIDIA device plugin, the GPU Operator, mig-parted and the MIG
manager, GPU Feature Discovery, the node-label reconciler, HAMi, Flux, the admission webhook and the API server's
ValidatingAdmissionPolicies (the rules, and the tenancy guard on namespace labels), the in-cluster audit's
CronJob, the Namespaces, and monitoring. Each renders plain Kubernetes objects from a resolved policy and writes
nothing (compiler/README.md)."""
