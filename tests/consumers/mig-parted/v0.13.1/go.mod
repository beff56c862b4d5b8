// mig-parted v0.13.1's parser (k8s-mig-manager v0.13.x, the GPU Operator v25.10.x default; its api/spec/v1,
// pkg/types and cmd/nvidia-mig-parted/assert are unchanged up to v0.14.2), with its own go.mod's versions.
module gpupolicy.dev/consumers/mig-parted

go 1.24.0

require (
	github.com/NVIDIA/mig-parted v0.13.1
	gpupolicy.dev/consumers/glue v0.0.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/NVIDIA/go-nvlib v0.8.1 // indirect
	github.com/NVIDIA/go-nvml v0.13.0-1 // indirect
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/urfave/cli/v2 v2.27.7 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.31.0 // indirect
)

replace gpupolicy.dev/consumers/glue => ../../glue
