"""Padded lengths: the shapes jitted code is compiled for.

A length is rounded up to one of four steps per doubling (8, 10, 12, 14, 16, 20, 24,
28, 32, 40, …), so padding wastes at most a quarter of the compute (powers of two waste
up to half), while a run whose sequences grow from 500 to 8,000 tokens compiles each
function about 16 times, each once (the JAX compilation cache keeps them across
restarts).
"""

from __future__ import annotations

MIN_LENGTH = 8
STEPS_PER_DOUBLING = 4


def bucket_length(length: int) -> int:
    """The padded length of ``length`` tokens (≥ ``MIN_LENGTH``)."""
    n = max(length, MIN_LENGTH)
    step = max(1, (1 << (n - 1).bit_length()) // (2 * STEPS_PER_DOUBLING))
    return -(-n // step) * step


def buckets_up_to(longest: int) -> tuple[int, ...]:
    """Every padded length up to the one of ``longest``, ascending."""
    out = [bucket_length(1)]
    while out[-1] < longest:
        out.append(bucket_length(out[-1] + 1))
    return tuple(out)
