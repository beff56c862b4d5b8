// mig-parted v0.12.1's parser, which the compiled trees deploy (k8s-mig-manager v0.12.1, the GPU Operator
// v25.3.x default). The module proxy refuses github.com/NVIDIA/mig-parted@v0.12.1 ("This module version is not
// available"), so this builds v0.10.0, whose api/spec/v1, pkg/types and cmd/nvidia-mig-parted/{assert,util}
// are byte-identical to v0.12.1's (git diff v0.10.0 v0.12.1 on those paths is empty), with the go-nvlib and
// go-nvml versions v0.12.1's go.mod pins: the profile grammar lives in go-nvlib.
module gpupolicy.dev/consumers/mig-parted

go 1.23.0

require (
	github.com/NVIDIA/mig-parted v0.10.0
	gpupolicy.dev/consumers/glue v0.0.0
	sigs.k8s.io/yaml v1.4.0
)

require (
	github.com/NVIDIA/go-nvlib v0.7.1 // indirect
	github.com/NVIDIA/go-nvml v0.12.4-1 // indirect
	github.com/cpuguy83/go-md2man/v2 v2.0.5 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/urfave/cli/v2 v2.27.5 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/sys v0.21.0 // indirect
)

replace gpupolicy.dev/consumers/glue => ../../glue
