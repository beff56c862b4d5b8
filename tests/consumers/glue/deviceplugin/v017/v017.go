// Package v017 holds the flags and validateFlags of device-plugin v0.17.x, which later releases keep
// (cmd/nvidia-device-plugin/main.go at v0.17.4, v0.18.2, v0.19.3): the renamed driver-root and CDI hook flags
// (the old names kept as aliases), device discovery and IMEX channels.
package v017

import (
	"fmt"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"

	"gpupolicy.dev/consumers/glue/deviceplugin"
	"gpupolicy.dev/consumers/glue/deviceplugin/v015"
)

// Flags are v0.17's flags, followed by those a later release adds (v0.18.0: gdrcopy-enabled).
func Flags(own ...cli.Flag) []cli.Flag {
	return deviceplugin.CommonFlags(append([]cli.Flag{
		&cli.StringFlag{Name: "driver-root", Aliases: []string{"nvidia-driver-root"}, Value: "/", EnvVars: []string{"NVIDIA_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "dev-root", Aliases: []string{"nvidia-dev-root"}, EnvVars: []string{"NVIDIA_DEV_ROOT"}},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(spec.DeviceListStrategyEnvVar), EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.BoolFlag{Name: "gds-enabled", EnvVars: []string{"GDS_ENABLED"}},
		&cli.BoolFlag{Name: "mofed-enabled", EnvVars: []string{"MOFED_ENABLED"}},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: spec.DefaultCDIAnnotationPrefix, EnvVars: []string{"CDI_ANNOTATION_PREFIX"}},
		&cli.StringFlag{Name: "nvidia-cdi-hook-path", Aliases: []string{"nvidia-ctk-path"}, Value: spec.DefaultNvidiaCTKPath, EnvVars: []string{"NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"}},
		&cli.StringFlag{Name: "driver-root-ctr-path", Aliases: []string{"container-driver-root"}, Value: spec.DefaultContainerDriverRoot, EnvVars: []string{"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "mps-root", EnvVars: []string{"MPS_ROOT"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "auto", EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.IntSliceFlag{Name: "imex-channel-ids", EnvVars: []string{"IMEX_CHANNEL_IDS"}},
		&cli.BoolFlag{Name: "imex-required", EnvVars: []string{"IMEX_REQUIRED"}},
	}, own...)...)
}

// Validate restates the checks of validateFlags (v0.17.4-v0.19.3) that need no NVML, with the plugin's
// messages; the CDI-needs-NVML check is left out (it asks the node).
func Validate(config *spec.Config) error {
	if _, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy); err != nil {
		return fmt.Errorf("invalid --device-list-strategy option: %v", err)
	}
	if err := deviceplugin.CheckDeviceIDStrategy(config); err != nil {
		return err
	}
	if err := v015.ValidateMPS(config); err != nil {
		return err
	}
	if d := *config.Flags.DeviceDiscoveryStrategy; d != "auto" && d != "nvml" && d != "tegra" {
		return fmt.Errorf("invalid --device-discovery-strategy option %v", d)
	}
	if m := *config.Flags.MigStrategy; m != spec.MigStrategyNone && m != spec.MigStrategySingle && m != spec.MigStrategyMixed {
		return fmt.Errorf("unknown MIG strategy: %v", m)
	}
	if err := spec.AssertChannelIDsValid(config.Imex.ChannelIDs); err != nil {
		return fmt.Errorf("invalid IMEX channel IDs: %w", err)
	}
	return nil
}
