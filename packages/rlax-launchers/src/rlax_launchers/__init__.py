"""rlax-launchers: an RLAX plugin package."""
