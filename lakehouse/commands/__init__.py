"""The top floor: the `lakehouse` command line, the demo and the cluster launchers. Nothing in
the project imports it."""
