"""Padded lengths: four per doubling, never more than a quarter of padding."""

from __future__ import annotations

from rlax_core.generate.buckets import bucket_length, buckets_up_to


def test_padding_wastes_at_most_a_quarter_and_every_length_has_a_listed_bucket() -> None:
    listed = buckets_up_to(32768)
    assert listed[:10] == (8, 10, 12, 14, 16, 20, 24, 28, 32, 40)
    assert listed[-1] == 32768 and list(listed) == sorted(set(listed))
    for n in range(1, 32769):
        padded = bucket_length(n)
        assert padded in listed and padded >= n
        assert padded <= max(8, 1.25 * n), n  # powers of two would allow 2 × n
    assert len([b for b in listed if 1024 < b <= 2048]) == 4  # four shapes per doubling
