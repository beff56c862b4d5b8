// Command harness loads one device-plugin config file with NVIDIA k8s-device-plugin v0.15.0's own code and prints
// the effective config, or the plugin's own error (the steps, output and exit status: package
// gpupolicy.dev/consumers/glue/deviceplugin).
//
// v0.15.0 is where MPS arrived: cmd/nvidia-device-plugin/main.go adds the mps-root flag to v0.14's, loadConfig
// runs validateFlags (with its MPS checks) before startPlugins calls spec.DisableResourceNamingInConfig(logger,
// config), which moved to api/config/v1 in this release.
package main

import (
	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"

	"gpupolicy.dev/consumers/glue/deviceplugin"
	"gpupolicy.dev/consumers/glue/deviceplugin/v014"
	"gpupolicy.dev/consumers/glue/deviceplugin/v015"
)

func main() {
	deviceplugin.Main(deviceplugin.Release{
		Flags: v014.Flags(&cli.StringFlag{Name: "mps-root", EnvVars: []string{"MPS_ROOT"}}),
		Prepare: func(config *spec.Config) error {
			if err := v014.ValidateStrategies(config); err != nil {
				return err
			}
			if err := v015.ValidateMPS(config); err != nil {
				return err
			}
			spec.DisableResourceNamingInConfig(deviceplugin.Warnings{}, config)
			return nil
		},
		Summarize: v015.Summarize,
	})
}
