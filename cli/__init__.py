"""The gpupolicy command line: the composition root that reads files, runs the core and maps results to exit codes.

`cli.main` holds the root parser, the command table and the single error boundary; each module of
`cli.commands` is one subcommand, imported only when it runs. Nothing below `policy`, `compiler`,
`webhook` or `cluster` imports this package.
"""
