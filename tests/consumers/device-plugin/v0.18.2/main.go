// Command harness loads one device-plugin config file with NVIDIA k8s-device-plugin v0.18.2's own code and prints
// the effective config, or the plugin's own error (the steps, output and exit status: package
// gpupolicy.dev/consumers/glue/deviceplugin). v0.18.2 runs the flags and steps of v0.18.0 and later
// (glue/deviceplugin/v018).
package main

import (
	"gpupolicy.dev/consumers/glue/deviceplugin"
	"gpupolicy.dev/consumers/glue/deviceplugin/v018"
)

func main() { deviceplugin.Main(v018.Release()) }
