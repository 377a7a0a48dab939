"""The `memgate` command line and its subcommands: setup, stores, status and doctor."""
