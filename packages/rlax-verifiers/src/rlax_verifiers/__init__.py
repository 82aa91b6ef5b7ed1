"""rlax-verifiers: judges and sandbox backends for RLAX."""
