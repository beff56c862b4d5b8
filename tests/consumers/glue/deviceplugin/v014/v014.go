// Package v014 holds the steps of device-plugin v0.14.x and the flags v0.15 keeps from it
// (cmd/nvidia-device-plugin/main.go at v0.14.5 and v0.15.0): device-list-strategy became a list, checked by
// spec.NewDeviceListStrategies, and the CDI flags arrived.
package v014

import (
	"fmt"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"

	"gpupolicy.dev/consumers/glue/deviceplugin"
)

// Flags are v0.14's flags, followed by those a later release adds (v0.15.0: mps-root).
func Flags(own ...cli.Flag) []cli.Flag {
	return deviceplugin.CommonFlags(append([]cli.Flag{
		&cli.StringFlag{Name: "nvidia-driver-root", Value: "/", EnvVars: []string{"NVIDIA_DRIVER_ROOT"}},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(spec.DeviceListStrategyEnvvar), EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.BoolFlag{Name: "gds-enabled", EnvVars: []string{"GDS_ENABLED"}},
		&cli.BoolFlag{Name: "mofed-enabled", EnvVars: []string{"MOFED_ENABLED"}},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: spec.DefaultCDIAnnotationPrefix, EnvVars: []string{"CDI_ANNOTATION_PREFIX"}},
		&cli.StringFlag{Name: "nvidia-ctk-path", Value: spec.DefaultNvidiaCTKPath, EnvVars: []string{"NVIDIA_CTK_PATH"}},
		&cli.StringFlag{Name: "container-driver-root", Value: spec.DefaultContainerDriverRoot, EnvVars: []string{"CONTAINER_DRIVER_ROOT"}},
	}, own...)...)
}

// ValidateStrategies restates the strategy checks of validateFlags (v0.14.5, v0.15.0), with their messages.
func ValidateStrategies(config *spec.Config) error {
	if _, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy); err != nil {
		return fmt.Errorf("invalid --device-list-strategy option: %v", err)
	}
	return deviceplugin.CheckDeviceIDStrategy(config)
}

// Release is v0.14's loadConfig and startPlugins: validateFlags, then disableResourceRenamingInConfig.
func Release() deviceplugin.Release {
	return deviceplugin.ReleaseBeforeV015(Flags(), ValidateStrategies)
}
