// Command harness parses one mig-parted config file as mig-parted v0.13.1 does (see its go.mod for the code it
// builds); what it runs, prints and exits with: package gpupolicy.dev/consumers/glue/migparted, which every
// mig-parted release module shares (assert.ParseConfigFile and GetSelectedMigConfig are alike in all).
package main

import "gpupolicy.dev/consumers/glue/migparted"

func main() { migparted.Main() }
