"""Dtype names, byte views and checksums of host arrays."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import xxhash

from rlax_core.tensors import (
    SUPPORTED_DTYPES,
    IncomingChecksum,
    as_host_array,
    byte_view,
    dtype_from_name,
    manifest_checksum,
    tensor_checksum,
    tensor_checksums,
)


@pytest.mark.parametrize("name", SUPPORTED_DTYPES)
def test_every_supported_dtype_round_trips_by_name(name: str) -> None:
    array = np.zeros(3, dtype=dtype_from_name(name))
    assert array.dtype.name == name


def test_unknown_dtype_names_are_refused() -> None:
    with pytest.raises(ValueError, match="complex64"):
        dtype_from_name("complex64")


def test_non_arrays_and_object_arrays_are_refused() -> None:
    with pytest.raises(TypeError, match=r"'w'.*list"):
        as_host_array("w", [1, 2, 3])
    with pytest.raises(TypeError, match="dtype object"):
        as_host_array("w", np.array([object()]))


def test_checksum_is_xxh3_128_of_the_raw_bytes() -> None:
    array = np.arange(10, dtype=ml_dtypes.bfloat16)
    assert tensor_checksum(array) == xxhash.xxh3_128_hexdigest(array.tobytes())
    assert bytes(byte_view(array)) == array.tobytes()


def test_parallel_and_serial_checksums_agree() -> None:
    rng = np.random.default_rng(0)
    arrays = {f"t{i}": rng.standard_normal(3 << 20).astype(np.float32) for i in range(3)}
    arrays["small"] = np.ones(4, np.float32)
    assert tensor_checksums(arrays) == {n: tensor_checksum(a) for n, a in arrays.items()}
    assert list(tensor_checksums(arrays)) == list(arrays)


def test_manifest_checksum_covers_names_dtypes_shapes_and_content() -> None:
    base = [("w", "float32", (2, 3), "aa"), ("b", "float32", (3,), "bb")]
    assert manifest_checksum(base) == manifest_checksum(list(reversed(base)))
    for changed in (
        [("v", "float32", (2, 3), "aa"), base[1]],
        [("w", "bfloat16", (2, 3), "aa"), base[1]],
        [("w", "float32", (3, 2), "aa"), base[1]],
        [("w", "float32", (2, 3), "ab"), base[1]],
    ):
        assert manifest_checksum(changed) != manifest_checksum(base)


def test_incoming_checksum_equals_the_whole_arrays_in_any_arrival_order() -> None:
    array = np.arange(1000, dtype=np.float32)
    data = memoryview(array.view(np.uint8))
    pieces = [(offset, data[offset : offset + 1000]) for offset in range(0, 4000, 1000)]
    in_order, shuffled = IncomingChecksum(), IncomingChecksum()
    for offset, piece in pieces:
        in_order.add(offset, piece)
    for offset, piece in [pieces[1], pieces[0], *pieces[2:]]:
        shuffled.add(offset, piece)
    assert in_order.hexdigest(array) == shuffled.hexdigest(array) == tensor_checksum(array)
    # Bytes changed after they were hashed in order are not the bytes that arrived.
    array[0] = -1.0
    assert in_order.hexdigest(array) != tensor_checksum(array)
