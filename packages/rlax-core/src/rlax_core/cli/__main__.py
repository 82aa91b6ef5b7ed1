"""``python -m rlax_core.cli`` runs the ``rlax`` command."""

from rlax_core.cli.main import entry_point

entry_point()
