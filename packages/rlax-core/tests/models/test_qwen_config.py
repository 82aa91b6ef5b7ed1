"""Named sizes match the published parameter counts; config.json round-trips."""

from __future__ import annotations

import pytest

from rlax_core.models import PRESETS, QwenConfig

# (preset, parameters, non-embedding parameters) in billions, as the model cards print
# them: a count matches when it is within one unit of the last printed digit (cards
# round some figures and truncate others: 7.6156B is printed 7.61B). The Qwen2.5-14B and -32B
# cards (and QwQ-32B's) understate their own weights (32.5B printed, 32.76B in the
# safetensors): for those, 1% relative.
PUBLISHED = [
    ("qwen2_5_0_5b", "0.49", "0.36"),
    ("qwen2_5_1_5b", "1.54", "1.31"),
    ("qwen2_5_3b", "3.09", "2.77"),
    ("qwen2_5_7b", "7.61", "6.53"),
    ("qwen2_5_14b", "14.7", "13.1"),
    ("qwen2_5_32b", "32.5", "31.0"),
    ("qwq_32b", "32.5", "31.0"),
    ("qwen3_0_6b", "0.6", "0.44"),
    ("qwen3_1_7b", "1.7", "1.4"),
    ("qwen3_4b", "4.0", "3.6"),
    ("qwen3_8b", "8.2", "6.95"),
    ("qwen3_14b", "14.8", "13.2"),
    ("qwen3_32b", "32.8", "31.2"),
]
UNDERSTATED = {"qwen2_5_14b", "qwen2_5_32b", "qwq_32b"}


def _matches(count: int, printed: str, preset: str) -> bool:
    billions = count / 1e9
    if preset in UNDERSTATED:
        return billions == pytest.approx(float(printed), rel=0.01)
    unit = 10.0 ** -len(printed.split(".")[1])
    return abs(billions - float(printed)) <= unit


@pytest.mark.parametrize(("preset", "total", "non_embedding"), PUBLISHED)
def test_parameter_counts_match_the_model_cards(
    preset: str, total: str, non_embedding: str
) -> None:
    config = PRESETS[preset]()
    assert _matches(config.num_params(), total, preset), config.num_params()
    assert _matches(config.num_non_embedding_params(), non_embedding, preset)


def test_exact_counts_of_two_architectures() -> None:
    # Hand-checked against the safetensors of Qwen2.5-0.5B (494,032,768).
    assert QwenConfig.preset("qwen2_5_0_5b").num_params() == 494_032_768
    assert QwenConfig.preset("qwq_32b").max_position_embeddings == 40960


# Every preset's sizes, as the published config.json files give them: (vocab, hidden,
# intermediate, layers, heads, kv heads, head_dim, tied embeddings, context).
SIZES = {
    "tiny": (512, 64, 128, 2, 4, 2, 16, True, 2048),
    "tiny-qwen3": (512, 64, 128, 2, 4, 2, 16, True, 2048),
    "qwen2_5_0_5b": (151936, 896, 4864, 24, 14, 2, 64, True, 32768),
    "qwen2_5_1_5b": (151936, 1536, 8960, 28, 12, 2, 128, True, 32768),
    "qwen2_5_3b": (151936, 2048, 11008, 36, 16, 2, 128, True, 32768),
    "qwen2_5_7b": (152064, 3584, 18944, 28, 28, 4, 128, False, 32768),
    "qwen2_5_14b": (152064, 5120, 13824, 48, 40, 8, 128, False, 32768),
    "qwen2_5_32b": (152064, 5120, 27648, 64, 40, 8, 128, False, 32768),
    "qwq_32b": (152064, 5120, 27648, 64, 40, 8, 128, False, 40960),
    "qwen3_0_6b": (151936, 1024, 3072, 28, 16, 8, 128, True, 40960),
    "qwen3_1_7b": (151936, 2048, 6144, 28, 16, 8, 128, True, 40960),
    "qwen3_4b": (151936, 2560, 9728, 36, 32, 8, 128, True, 40960),
    "qwen3_8b": (151936, 4096, 12288, 36, 32, 8, 128, False, 40960),
    "qwen3_14b": (151936, 5120, 17408, 40, 40, 8, 128, False, 40960),
    "qwen3_32b": (151936, 5120, 25600, 64, 64, 8, 128, False, 40960),
}


def test_every_preset_has_its_published_sizes() -> None:
    assert set(PRESETS) == set(SIZES)
    for name, make in PRESETS.items():
        config = make()
        assert config == QwenConfig.preset(name)
        got = (
            config.vocab_size, config.hidden_size, config.intermediate_size, config.num_layers,
            config.num_heads, config.num_kv_heads, config.head_dim, config.tie_embeddings,
            config.max_position_embeddings,
        )  # fmt: skip
        assert got == SIZES[name], name
        qwen3 = name.startswith(("qwen3", "tiny-qwen3"))
        assert config.architecture == ("qwen3" if qwen3 else "qwen2"), name
        assert (config.qkv_bias, config.qk_norm) == (not qwen3, qwen3), name
        assert (config.rope_theta, config.rms_norm_eps) == (1_000_000.0, 1e-6), name
        assert (config.param_dtype, config.dtype, config.remat) == ("float32", "float32", False)


def test_an_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown preset 'qwen9'; presets: tiny, "):
        QwenConfig.preset("qwen9")


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_hf_config_round_trips(preset: str) -> None:
    config = PRESETS[preset]()
    assert QwenConfig.from_hf(config.to_hf()) == config


def test_invalid_head_grouping_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        QwenConfig.tiny(num_heads=6, num_kv_heads=4)
