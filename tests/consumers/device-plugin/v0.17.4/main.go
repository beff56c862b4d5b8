// Command harness loads one device-plugin config file with NVIDIA k8s-device-plugin v0.17.4's own code and prints
// the effective config, or the plugin's own error (the steps, output and exit status: package
// gpupolicy.dev/consumers/glue/deviceplugin).
//
// v0.17.4 runs v0.17's flags and validateFlags (glue/deviceplugin/v017); its startPlugins disables the resource
// naming (spec.DisableResourceNamingInConfig, still with its logger parameter) before it validates the flags.
package main

import (
	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"

	"gpupolicy.dev/consumers/glue/deviceplugin"
	"gpupolicy.dev/consumers/glue/deviceplugin/v015"
	"gpupolicy.dev/consumers/glue/deviceplugin/v017"
)

func main() {
	deviceplugin.Main(deviceplugin.Release{
		Flags: v017.Flags(),
		Prepare: func(config *spec.Config) error {
			spec.DisableResourceNamingInConfig(deviceplugin.Warnings{}, config)
			return v017.Validate(config)
		},
		Summarize: v015.Summarize,
	})
}
