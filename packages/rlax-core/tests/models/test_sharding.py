"""Sharded on an 8-device CPU mesh, the model and sampler give the single-device results."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec

from rlax_core.generate import Sampler, SamplingParams
from rlax_core.models import MeshShape, QwenConfig, flat_params, init_model, load_pretrained

MESHES = [
    MeshShape(data=2, fsdp=2, tensor=2),
    MeshShape(fsdp=8),
    MeshShape(tensor=8),
    MeshShape(data=4, tensor=2),
]


@pytest.fixture(scope="module", autouse=True)
def eight_devices() -> None:
    if len(jax.devices()) < 8:
        pytest.fail(
            "sharding tests need XLA_FLAGS=--xla_force_host_platform_device_count=8 (conftest.py)"
        )


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: f"{s.data}x{s.fsdp}x{s.tensor}")
def test_sharded_forward_equals_single_device(hf_reference: Path, shape: MeshShape) -> None:
    reference = np.load(hf_reference / "qwen3_gqa4" / "reference.npz")
    single = load_pretrained(hf_reference / "qwen3_gqa4")
    sharded = load_pretrained(hf_reference / "qwen3_gqa4", mesh=shape.make())
    tokens = jnp.asarray(np.tile(reference["tokens"], (4, 1)))  # batch 8 splits over data axes
    expected = np.asarray(nnx.jit(lambda m, t: m(t).logits)(single, tokens))
    got = np.asarray(nnx.jit(lambda m, t: m(t).logits)(sharded, tokens))
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()


def test_parameters_are_placed_on_their_shards(hf_reference: Path) -> None:
    mesh = MeshShape(data=2, fsdp=2, tensor=2).make()
    params = flat_params(load_pretrained(hf_reference / "qwen3_gqa4", mesh=mesh))
    q = params["model.layers.0.self_attn.q_proj.weight"]  # (128, 64)
    assert q.sharding.spec == PartitionSpec("tensor", "fsdp")
    assert len(q.addressable_shards) == 8
    assert q.addressable_shards[0].data.shape == (64, 32)
    o_proj = params["model.layers.0.self_attn.o_proj.weight"]
    assert o_proj.sharding.spec == PartitionSpec("fsdp", "tensor")
    assert params["model.norm.weight"].sharding.spec == PartitionSpec()


def test_an_axis_that_does_not_divide_a_dimension_is_replicated(hf_reference: Path) -> None:
    mesh = MeshShape(tensor=8).make()
    params = flat_params(load_pretrained(hf_reference / "qwen3_odd_gqa5", mesh=mesh))
    # 5 heads × 12 = 60 rows: not divisible by 8 devices, so that dimension stays whole.
    assert params["model.layers.0.self_attn.q_proj.weight"].sharding.spec == PartitionSpec(
        None, None
    )
    assert params["model.layers.0.mlp.up_proj.weight"].sharding.spec == PartitionSpec(
        "tensor", None
    )


@pytest.mark.parametrize(
    "shape", [MeshShape(data=2, fsdp=2, tensor=2), MeshShape(data=8)], ids=["2x2x2", "8x1x1"]
)
def test_sharded_generation_equals_single_device(hf_reference: Path, shape: MeshShape) -> None:
    prompts = [[5, 17, 201, 33], [9], [44, 45, 46, 47, 48, 49, 50], [3, 3, 3]]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=0.95)
    single = Sampler(load_pretrained(hf_reference / "qwen3_gqa4")).generate(prompts, params, seed=5)
    mesh = shape.make()
    sampler = Sampler(load_pretrained(hf_reference / "qwen3_gqa4", mesh=mesh), mesh=mesh)
    sharded = sampler.generate(prompts, params, seed=5)
    assert sharded.tokens == single.tokens
    for a, b in zip(sharded.policy_logprobs, single.policy_logprobs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # The batch is padded to split evenly over the data-parallel devices.
    assert sampler.bucket_shape(3, 4)[0] == max(4, shape.data * shape.fsdp)


def test_random_init_on_a_mesh() -> None:
    mesh = MeshShape(fsdp=4, tensor=2).make()
    model = init_model(QwenConfig.tiny(), seed=0, mesh=mesh)
    embed = flat_params(model)["model.embed_tokens.weight"]
    assert embed.sharding.spec == PartitionSpec("tensor", "fsdp")
    unsharded = flat_params(init_model(QwenConfig.tiny(), seed=0))["model.embed_tokens.weight"]
    np.testing.assert_array_equal(np.asarray(embed), np.asarray(unsharded))
