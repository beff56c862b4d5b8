package deviceplugin

import (
	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"
)

// The steps of releases before v0.15.0 (v0.12-v0.14), which know one sharing block, timeSlicing
// (api/config/v1/sharing.go); they compile against later releases too, which keep those fields.

// ReleaseBeforeV015 is loadConfig and startPlugins of v0.12-v0.14: the release's validateFlags, then its
// disableResourceRenamingInConfig.
func ReleaseBeforeV015(flags []cli.Flag, validateFlags func(*spec.Config) error) Release {
	return Release{
		Flags: flags,
		Prepare: func(config *spec.Config) error {
			if err := validateFlags(config); err != nil {
				return err
			}
			DisableRenamingBeforeV015(config)
			return nil
		},
		Summarize: SummarizeBeforeV015,
	}
}

// DisableRenamingBeforeV015 restates disableResourceRenamingInConfig of cmd/nvidia-device-plugin/main.go
// (v0.12.3-v0.14.5), unexported there: the resources section is dropped, and every time-slicing resource loses
// its devices selection and any rename but <name>.shared under renameByDefault (the plugin only warns).
func DisableRenamingBeforeV015(config *spec.Config) {
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

// SummarizeBeforeV015 summarizes a config of a release without a sharing strategy label: "time-slicing" here
// means some resource has more than one replica, as GFD reads it.
func SummarizeBeforeV015(config *spec.Config) Summary {
	ts := config.Sharing.TimeSlicing
	s := Summary{MigStrategy: *config.Flags.MigStrategy, SharingStrategy: "none", RenameByDefault: ts.RenameByDefault,
		FailRequestsGreaterThanOne: ts.FailRequestsGreaterThanOne, Resources: []Resource{}}
	for _, r := range ts.Resources {
		if r.Replicas > 1 {
			s.SharingStrategy = "time-slicing"
		}
		s.Resources = append(s.Resources, Advertise(r.Name, r.Rename, r.Replicas))
	}
	return s
}
