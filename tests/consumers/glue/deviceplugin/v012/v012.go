// Package v012 holds the steps of device-plugin v0.12.x and v0.13.x (cmd/nvidia-device-plugin/main.go at
// v0.12.3 and v0.13.0), where device-list-strategy is one string; v0.14.0 made it a list.
package v012

import (
	"fmt"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"

	"gpupolicy.dev/consumers/glue/deviceplugin"
)

// Release is v0.12/v0.13's loadConfig and startPlugins: validateFlags, then disableResourceRenamingInConfig.
// own are the flags a release adds to v0.12's (v0.13.0: gds-enabled, mofed-enabled).
func Release(own ...cli.Flag) deviceplugin.Release {
	flags := append([]cli.Flag{
		&cli.StringFlag{Name: "nvidia-driver-root", Value: "/", EnvVars: []string{"NVIDIA_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "device-list-strategy", Value: spec.DeviceListStrategyEnvvar, EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
	}, own...)
	return deviceplugin.ReleaseBeforeV015(deviceplugin.CommonFlags(flags...), validateFlags)
}

// validateFlags restates validateFlags of cmd/nvidia-device-plugin/main.go (v0.12.3, v0.13.0), with its messages.
func validateFlags(config *spec.Config) error {
	if s := *config.Flags.Plugin.DeviceListStrategy; s != spec.DeviceListStrategyEnvvar && s != spec.DeviceListStrategyVolumeMounts {
		return fmt.Errorf("invalid --device-list-strategy option: %v", s)
	}
	return deviceplugin.CheckDeviceIDStrategy(config)
}
