"""The ``rlax`` command."""
