"""rlax-transport-nats: an RLAX plugin package."""
