// Command harness loads one device-plugin config file with NVIDIA k8s-device-plugin v0.13.0's own code and prints
// the effective config, or the plugin's own error (the steps, output and exit status: package
// gpupolicy.dev/consumers/glue/deviceplugin). v0.13.0 runs v0.12's steps; its cmd/nvidia-device-plugin/main.go
// adds the gds-enabled and mofed-enabled flags.
package main

import (
	cli "github.com/urfave/cli/v2"

	"gpupolicy.dev/consumers/glue/deviceplugin"
	"gpupolicy.dev/consumers/glue/deviceplugin/v012"
)

func main() {
	deviceplugin.Main(v012.Release(
		&cli.BoolFlag{Name: "gds-enabled", EnvVars: []string{"GDS_ENABLED"}},
		&cli.BoolFlag{Name: "mofed-enabled", EnvVars: []string{"MOFED_ENABLED"}},
	))
}
