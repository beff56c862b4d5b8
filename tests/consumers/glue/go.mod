// The glue every consumer harness shares: output, exit codes, strict decoding, and the steps of each release
// family that more than one release module runs. It requires nothing: its packages import the consumers'
// packages, which every release module already requires at its own release, so this module never moves a
// version in a harness's build list (Go resolves a dependency's imports from the main module's build list).
// Each release module points here with `replace gpupolicy.dev/consumers/glue => ../../glue`; a package of it
// is compiled only into the harnesses that import it, so a family package may use API that older releases lack.
module gpupolicy.dev/consumers/glue

go 1.18
