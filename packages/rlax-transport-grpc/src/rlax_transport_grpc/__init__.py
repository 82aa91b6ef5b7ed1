"""rlax-transport-grpc: an RLAX plugin package."""
