// Package v015 holds what device-plugin v0.15.0 and every later release share: the sharing.mps block and the
// sharing strategy (api/config/v1/sharing.go, from v0.15.0), and validateFlags' MPS checks.
package v015

import (
	"fmt"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"

	"gpupolicy.dev/consumers/glue/deviceplugin"
)

// ValidateMPS restates validateFlags' MPS checks (cmd/nvidia-device-plugin/main.go, v0.15.0-v0.19.3).
func ValidateMPS(config *spec.Config) error {
	if config.Sharing.SharingStrategy() == spec.SharingStrategyMPS {
		if *config.Flags.MigStrategy == spec.MigStrategyMixed {
			return fmt.Errorf("using --mig-strategy=mixed is not supported with MPS")
		}
		if config.Flags.MpsRoot == nil || *config.Flags.MpsRoot == "" {
			return fmt.Errorf("using MPS requires --mps-root to be specified")
		}
	}
	return nil
}

// Summarize reads the block the plugin replicates from: sharing.mps whenever present, else timeSlicing
// (Sharing.ReplicatedResources, api/config/v1/sharing.go), and the strategy label GFD writes.
func Summarize(config *spec.Config) deviceplugin.Summary {
	s := deviceplugin.Summary{MigStrategy: *config.Flags.MigStrategy, SharingStrategy: string(config.Sharing.SharingStrategy()),
		Resources: []deviceplugin.Resource{}}
	active := config.Sharing.ReplicatedResources()
	s.RenameByDefault = active.RenameByDefault
	s.FailRequestsGreaterThanOne = active.FailRequestsGreaterThanOne
	for _, r := range active.Resources {
		s.Resources = append(s.Resources, deviceplugin.Advertise(r.Name, r.Rename, r.Replicas))
	}
	return s
}
