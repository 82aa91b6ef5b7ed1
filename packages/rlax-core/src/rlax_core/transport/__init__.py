"""Transports built into rlax-core (networked ones are plugins)."""
