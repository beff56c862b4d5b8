// Package v018 is device-plugin v0.18.0 and later (v0.18.2, v0.19.3): v0.17's flags plus gdrcopy-enabled, and
// spec.DisableResourceNamingInConfig without its logger parameter (dropped in v0.18.0).
package v018

import (
	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"

	"gpupolicy.dev/consumers/glue/deviceplugin"
	"gpupolicy.dev/consumers/glue/deviceplugin/v015"
	"gpupolicy.dev/consumers/glue/deviceplugin/v017"
)

// Release is loadConfig and startPlugins from v0.18.0: NewConfig, then the resource naming disabled, then
// validateFlags.
func Release() deviceplugin.Release {
	return deviceplugin.Release{
		Flags: v017.Flags(&cli.BoolFlag{Name: "gdrcopy-enabled", EnvVars: []string{"GDRCOPY_ENABLED"}}),
		Prepare: func(config *spec.Config) error {
			spec.DisableResourceNamingInConfig(config)
			return v017.Validate(config)
		},
		Summarize: v015.Summarize,
	}
}
