// Package migparted is the mig-parted harness of every release module: it loads one mig-parted config file
// with NVIDIA mig-parted's own code (the release the module pins), as `nvidia-mig-parted assert --valid-config
// -f FILE -c NAME` does (what k8s-mig-manager runs before it applies the config a node's nvidia.com/mig.config
// label names), and prints what it parsed, or mig-parted's error.
//
// Parsing is assert.ParseConfigFile (cmd/nvidia-mig-parted/assert/assert.go: sigs.k8s.io/yaml into
// api/spec/v1.Spec, whose UnmarshalJSON methods are strict and check every mig-devices profile through
// pkg/types.MigConfig.AssertValidFormat); selection is assert.GetSelectedMigConfig. Nothing here calls NVML.
//
// Exit status: 0 with {"spec", "selected"} JSON on stdout; 1 with mig-parted's own error on stderr; 2 when
// mig-parted accepts the file but a strict YAML decode refuses it (a duplicate key, whose later value
// mig-parted silently keeps); 64 for bad usage.
package migparted

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	v1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	"github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted/assert"
	"sigs.k8s.io/yaml"
)

type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

// Main runs the harness on os.Args and exits.
func Main() {
	file := flag.String("f", "", "the mig-parted config file")
	var selected names
	flag.Var(&selected, "c", "a config to select (repeatable); none: every config in the file")
	flag.Parse()
	if *file == "" {
		fmt.Fprintln(os.Stderr, "usage: harness -f FILE [-c NAME]...")
		os.Exit(64)
	}

	spec, err := assert.ParseConfigFile(&assert.Flags{ConfigFile: *file})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if len(selected) == 0 {
		for name := range spec.MigConfigs {
			selected = append(selected, name)
		}
	}
	chosen := map[string]v1.MigConfigSpecSlice{}
	for _, name := range selected {
		config, err := assert.GetSelectedMigConfig(&assert.Flags{ConfigFile: *file, SelectedConfig: name}, spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		chosen[name] = config
	}
	out, err := json.Marshal(map[string]interface{}{"spec": spec, "selected": chosen})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))

	text, err := os.ReadFile(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var strict v1.Spec
	if err := yaml.UnmarshalStrict(text, &strict); err != nil {
		fmt.Fprintf(os.Stderr, "strict decode: %v\n", err)
		os.Exit(2)
	}
}
