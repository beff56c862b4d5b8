// Command harness loads one device-plugin config file with NVIDIA k8s-device-plugin v0.14.5's own code and prints
// the effective config, or the plugin's own error (the steps, output and exit status: package
// gpupolicy.dev/consumers/glue/deviceplugin). v0.14.5 runs v0.14's flags and steps (glue/deviceplugin/v014).
package main

import (
	"gpupolicy.dev/consumers/glue/deviceplugin"
	"gpupolicy.dev/consumers/glue/deviceplugin/v014"
)

func main() { deviceplugin.Main(v014.Release()) }
