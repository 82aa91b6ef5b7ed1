"""The ``docker`` sandbox: one locked-down container per batch of runs."""
