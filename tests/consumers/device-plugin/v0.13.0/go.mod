// The device plugin's config code at v0.13.0, with the urfave/cli and sigs.k8s.io/yaml versions its own go.mod
// pins (NVIDIA/k8s-device-plugin@v0.13.0:go.mod), so the decoder is the one the release was built with.
module gpupolicy.dev/consumers/device-plugin

go 1.18

require (
	github.com/NVIDIA/k8s-device-plugin v0.13.0
	github.com/urfave/cli/v2 v2.4.0
	gpupolicy.dev/consumers/glue v0.0.0
	sigs.k8s.io/yaml v1.2.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.1 // indirect
	github.com/go-logr/logr v0.2.0 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/google/gofuzz v1.1.0 // indirect
	github.com/google/uuid v1.1.1 // indirect
	github.com/json-iterator/go v1.1.10 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.1 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	golang.org/x/net v0.0.0-20201021035429-f5854403a974 // indirect
	golang.org/x/text v0.3.3 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v2 v2.2.8 // indirect
	k8s.io/apimachinery v0.19.1 // indirect
	k8s.io/klog/v2 v2.2.0 // indirect
	sigs.k8s.io/structured-merge-diff/v4 v4.0.1 // indirect
)

replace gpupolicy.dev/consumers/glue => ../../glue
