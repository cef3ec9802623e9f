"""Device-plugin domain: the config file and what a node advertises (pure, no I/O)."""
