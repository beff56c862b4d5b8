// Command harness loads one device-plugin config file with NVIDIA k8s-device-plugin v0.14.5's own code and prints
// the effective config, or the plugin's own error.
//
// It runs the steps cmd/nvidia-device-plugin/main.go (v0.14.5) runs before it needs a GPU: spec.NewConfig on a
// urfave/cli context carrying the plugin's own flags (defaults and environment variables, so the DaemonSet's env
// overrides the file as on a node), then its disableResourceRenamingInConfig (unexported in cmd/nvidia-device-
// plugin), and the plugin's validateFlags checks that need no NVML. Package main cannot be imported, so what lives
// there is restated below with the plugin's messages. On top it decodes strictly, which the plugin never does.
//
// Exit status: 0 with {"config", "summary"} JSON on stdout; 1 with the plugin's own error on stderr; 2 when the
// plugin accepts the file but a strict decode finds keys it ignores (stdout still has the JSON).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"gpupolicy.dev/consumers/strictkeys"
)

// pluginFlags are the flags of cmd/nvidia-device-plugin/main.go at v0.14.5 that the config file can also set
// (UpdateFromCLIFlags in api/config/v1/flags.go reads them by name), with their defaults and env vars.
func pluginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"FAIL_ON_INIT_ERROR"}},
		&cli.StringFlag{Name: "nvidia-driver-root", Value: "/", EnvVars: []string{"NVIDIA_DRIVER_ROOT"}},
		&cli.BoolFlag{Name: "pass-device-specs", Value: false, EnvVars: []string{"PASS_DEVICE_SPECS"}},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(spec.DeviceListStrategyEnvvar), EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.StringFlag{Name: "device-id-strategy", Value: spec.DeviceIDStrategyUUID, EnvVars: []string{"DEVICE_ID_STRATEGY"}},
		&cli.BoolFlag{Name: "gds-enabled", EnvVars: []string{"GDS_ENABLED"}},
		&cli.BoolFlag{Name: "mofed-enabled", EnvVars: []string{"MOFED_ENABLED"}},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: spec.DefaultCDIAnnotationPrefix, EnvVars: []string{"CDI_ANNOTATION_PREFIX"}},
		&cli.StringFlag{Name: "nvidia-ctk-path", Value: spec.DefaultNvidiaCTKPath, EnvVars: []string{"NVIDIA_CTK_PATH"}},
		&cli.StringFlag{Name: "container-driver-root", Value: spec.DefaultContainerDriverRoot, EnvVars: []string{"CONTAINER_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"CONFIG_FILE"}},
	}
}

// validateFlags restates validateFlags of cmd/nvidia-device-plugin/main.go (v0.14.5), with its messages.
func validateFlags(config *spec.Config) error {
	if _, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy); err != nil {
		return fmt.Errorf("invalid --device-list-strategy option: %v", err)
	}
	if id := *config.Flags.Plugin.DeviceIDStrategy; id != spec.DeviceIDStrategyUUID && id != spec.DeviceIDStrategyIndex {
		return fmt.Errorf("invalid --device-id-strategy option: %v", id)
	}
	return nil
}

// disableResourceRenaming restates disableResourceRenamingInConfig of cmd/nvidia-device-plugin/main.go (v0.14.5),
// unexported there: the resources section is dropped, and every time-slicing resource loses its devices
// selection and any rename but <name>.shared under renameByDefault (the plugin only warns about both).
func disableResourceRenaming(config *spec.Config) {
	config.Resources.GPUs = nil
	config.Resources.MIGs = nil
	ts := &config.Sharing.TimeSlicing
	for i, r := range ts.Resources {
		if ts.RenameByDefault {
			ts.Resources[i].Rename = r.Name.DefaultSharedRename()
		} else {
			ts.Resources[i].Rename = ""
		}
		ts.Resources[i].Devices.All = true
		ts.Resources[i].Devices.Count = 0
		ts.Resources[i].Devices.List = nil
	}
}

type resource struct {
	Name       string `json:"name"`
	Advertised string `json:"advertised"`
	Replicas   int    `json:"replicas"`
}

// summary is what the effective config means for the resources a node advertises.
type summary struct {
	MigStrategy                string     `json:"migStrategy"`
	SharingStrategy            string     `json:"sharingStrategy"`
	FailRequestsGreaterThanOne bool       `json:"failRequestsGreaterThanOne"`
	RenameByDefault            bool       `json:"renameByDefault"`
	Resources                  []resource `json:"resources"`
}

func summarize(config *spec.Config) summary {
	// Releases before v0.15.0 know one sharing block, timeSlicing (api/config/v1/sharing.go), and no sharing
	// strategy label: "time-slicing" here means some resource has more than one replica, as GFD reads it.
	ts := config.Sharing.TimeSlicing
	s := summary{MigStrategy: *config.Flags.MigStrategy, SharingStrategy: "none", RenameByDefault: ts.RenameByDefault,
		FailRequestsGreaterThanOne: ts.FailRequestsGreaterThanOne, Resources: []resource{}}
	for _, r := range ts.Resources {
		if r.Replicas > 1 {
			s.SharingStrategy = "time-slicing"
		}
		s.Resources = append(s.Resources, advertise(r.Name, r.Rename, r.Replicas))
	}
	return s
}

// advertise names the resource a replicated entry is advertised as: its rename when one is left after the
// renaming is disabled, else its name (internal/rm/device_map.go, updateDeviceMapWithReplicas).
func advertise(name, rename spec.ResourceName, replicas int) resource {
	advertised := string(name)
	if rename != "" {
		advertised = string(rename)
	}
	return resource{Name: string(name), Advertised: advertised, Replicas: replicas}
}

// strict decodes the file as the release never does: every key its Config types do not declare, including
// inside the sharing blocks' custom unmarshallers (strictkeys), then yaml.UnmarshalStrict with the release's
// own sigs.k8s.io/yaml (duplicate keys, and encoding/json's DisallowUnknownFields on the plain structs).
func strict(path string) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc interface{}
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return fmt.Errorf("strict decode: %v", err)
	}
	var typed spec.Config
	strictErr := yaml.UnmarshalStrict(text, &typed)
	if unknown := strictkeys.Unknown(doc, reflect.TypeOf(spec.Config{})); len(unknown) > 0 {
		if strictErr != nil {
			return fmt.Errorf("strict decode: keys v0.14.5 ignores: %v (%v)", unknown, strictErr)
		}
		return fmt.Errorf("strict decode: keys v0.14.5 ignores: %v", unknown)
	}
	if strictErr != nil {
		return fmt.Errorf("strict decode: %v", strictErr)
	}
	return nil
}

func load(c *cli.Context, flags []cli.Flag) error {
	// loadConfig (v0.14.5): NewConfig, then validateFlags, then the GFD flags dropped; startPlugins then disables
	// the resource naming.
	config, err := spec.NewConfig(c, flags)
	if err != nil {
		return cli.Exit(fmt.Sprintf("unable to finalize config: %v", err), 1)
	}
	if err := validateFlags(config); err != nil {
		return cli.Exit(fmt.Sprintf("unable to validate flags: %v", err), 1)
	}
	config.Flags.GFD = nil
	disableResourceRenaming(config)
	out, err := json.Marshal(map[string]interface{}{"config": config, "summary": summarize(config)})
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Println(string(out))
	if path := c.String("config-file"); path != "" {
		if err := strict(path); err != nil {
			return cli.Exit(err.Error(), 2)
		}
	}
	return nil
}

func main() {
	app := cli.NewApp()
	app.Name = "device-plugin-config-v0.14.5"
	app.Flags = pluginFlags()
	app.Action = func(c *cli.Context) error { return load(c, app.Flags) }
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(64)
	}
}
