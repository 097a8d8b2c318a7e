"""The `noetl` (alias `clictl`) command line."""
