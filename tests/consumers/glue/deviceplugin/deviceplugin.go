// Package deviceplugin is what every device-plugin harness runs, whatever its release: it compiles against
// NVIDIA/k8s-device-plugin api/config/v1 from v0.12.3 to v0.19.3 (only names all of them declare), with the
// urfave/cli and sigs.k8s.io/yaml versions the release module pins.
//
// A harness loads one config file as the plugin's cmd/nvidia-device-plugin/main.go does before it needs a GPU:
// spec.NewConfig on a urfave/cli context carrying the release's own flags (defaults and environment variables,
// so the DaemonSet's env overrides the file as on a node), then the release's steps (its validateFlags checks
// that need no NVML and its resource-renaming switch-off, in the release's order: Release.Prepare), then prints
// the effective config. Package main of the plugin cannot be imported, so what lives there is restated in the
// family packages beside this one (v012, v014, v015, v017, v018), with the plugin's messages. On top it decodes
// strictly, which the plugin never does.
//
// Exit status: 0 with {"config", "summary"} JSON on stdout; 1 with the plugin's own error on stderr; 2 when the
// plugin accepts the file but a strict decode finds keys it ignores (stdout still has the JSON); 64 for usage.
package deviceplugin

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"gpupolicy.dev/consumers/glue/strictkeys"
)

const module = "github.com/NVIDIA/k8s-device-plugin"

// Release is what one release family does differently.
type Release struct {
	// Flags are the release's flags that the config file can also set (UpdateFromCLIFlags in
	// api/config/v1/flags.go reads them by name), with their defaults and env vars: CommonFlags plus its own.
	Flags []cli.Flag
	// Prepare runs the release's validateFlags checks and its resource-renaming switch-off in its order; an
	// error is validateFlags' own, which loadConfig or startPlugins reports as "unable to validate flags".
	Prepare func(*spec.Config) error
	// Summarize says what the effective config means for the resources a node advertises.
	Summarize func(*spec.Config) Summary
}

// CommonFlags are the flags every release from v0.12 to v0.19 declares alike (cmd/nvidia-device-plugin/main.go),
// followed by the release's own.
func CommonFlags(own ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"FAIL_ON_INIT_ERROR"}},
		&cli.BoolFlag{Name: "pass-device-specs", Value: false, EnvVars: []string{"PASS_DEVICE_SPECS"}},
		&cli.StringFlag{Name: "device-id-strategy", Value: spec.DeviceIDStrategyUUID, EnvVars: []string{"DEVICE_ID_STRATEGY"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"CONFIG_FILE"}},
	}, own...)
}

// CheckDeviceIDStrategy is the device-id-strategy check of every release's validateFlags, with its message.
func CheckDeviceIDStrategy(config *spec.Config) error {
	if id := *config.Flags.Plugin.DeviceIDStrategy; id != spec.DeviceIDStrategyUUID && id != spec.DeviceIDStrategyIndex {
		return fmt.Errorf("invalid --device-id-strategy option: %v", id)
	}
	return nil
}

// Resource is one replicated entry as a node advertises it.
type Resource struct {
	Name       string `json:"name"`
	Advertised string `json:"advertised"`
	Replicas   int    `json:"replicas"`
}

// Summary is what the effective config means for the resources a node advertises.
type Summary struct {
	MigStrategy                string     `json:"migStrategy"`
	SharingStrategy            string     `json:"sharingStrategy"`
	FailRequestsGreaterThanOne bool       `json:"failRequestsGreaterThanOne"`
	RenameByDefault            bool       `json:"renameByDefault"`
	Resources                  []Resource `json:"resources"`
}

// Advertise names the resource a replicated entry is advertised as: its rename when one is left after the
// renaming is disabled, else its name (internal/rm/device_map.go, updateDeviceMapWithReplicas).
func Advertise(name, rename spec.ResourceName, replicas int) Resource {
	advertised := string(name)
	if rename != "" {
		advertised = string(rename)
	}
	return Resource{Name: string(name), Advertised: advertised, Replicas: replicas}
}

// Warnings satisfies api/config/v1's logger interface (Warning, Warningf) that DisableResourceNamingInConfig
// takes in v0.15-v0.17; the plugin passes klog, which writes to stderr too.
type Warnings struct{}

func (Warnings) Warning(args ...interface{}) {
	fmt.Fprintln(os.Stderr, append([]interface{}{"warning:"}, args...)...)
}

func (Warnings) Warningf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "warning: "+format+"\n", args...)
}

// Version is the plugin release this binary was built with, from the build list Go records in it.
func Version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == module {
				return dep.Version
			}
		}
	}
	return "(unknown)"
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
			return fmt.Errorf("strict decode: keys %s ignores: %v (%v)", Version(), unknown, strictErr)
		}
		return fmt.Errorf("strict decode: keys %s ignores: %v", Version(), unknown)
	}
	if strictErr != nil {
		return fmt.Errorf("strict decode: %v", strictErr)
	}
	return nil
}

func (r Release) load(c *cli.Context, flags []cli.Flag) error {
	config, err := spec.NewConfig(c, flags)
	if err != nil {
		return cli.Exit(fmt.Sprintf("unable to finalize config: %v", err), 1)
	}
	config.Flags.GFD = nil // loadConfig drops the GFD flags; no check reads them
	if err := r.Prepare(config); err != nil {
		return cli.Exit(fmt.Sprintf("unable to validate flags: %v", err), 1)
	}
	out, err := json.Marshal(map[string]interface{}{"config": config, "summary": r.Summarize(config)})
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

// Main runs the harness of release r on os.Args and exits.
func Main(r Release) {
	app := cli.NewApp()
	app.Name = "device-plugin-config-" + Version()
	app.Flags = r.Flags
	app.Action = func(c *cli.Context) error { return r.load(c, app.Flags) }
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(64)
	}
}
