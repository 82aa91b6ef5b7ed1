"""The Qwen2 / Qwen2.5 / QwQ / Qwen3 decoder configuration, with named sizes.

One dataclass covers both families: Qwen2 has q/k/v biases; Qwen3 has none and adds a
per-head RMSNorm on queries and keys. The named sizes (:data:`PRESETS`) copy the
published ``config.json`` files; ``tiny()`` is for tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

Architecture = Literal["qwen2", "qwen3"]

_HF_ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


@dataclass(frozen=True)
class QwenConfig:
    """Sizes and options of a Qwen decoder.

    Attributes:
        architecture: "qwen2" (Qwen2, Qwen2.5, QwQ) or "qwen3".
        vocab_size: rows of the embedding (and of the LM head).
        hidden_size: model width.
        intermediate_size: SwiGLU MLP width.
        num_layers: decoder layers.
        num_heads: query heads.
        num_kv_heads: key/value heads (GQA: num_heads is a multiple of it).
        head_dim: width of one head (Qwen2: hidden_size // num_heads).
        rope_theta: RoPE base frequency.
        rms_norm_eps: epsilon of every RMSNorm.
        tie_embeddings: the LM head reuses the embedding matrix.
        qkv_bias: q/k/v projections have biases (Qwen2).
        qk_norm: per-head RMSNorm on queries and keys (Qwen3).
        max_position_embeddings: longest context the checkpoint was trained for.
        param_dtype: dtype the parameters are stored in.
        dtype: dtype of activations and matmuls (norms, softmax and logits stay fp32).
        remat: rematerialise each layer's activations in the backward pass.
    """

    architecture: Architecture
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = False
    qkv_bias: bool = True
    qk_norm: bool = False
    max_position_embeddings: int = 32768
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: bool = False

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in ("float32", "bfloat16"):
                raise ValueError(
                    f"{name} must be 'float32' or 'bfloat16', got {getattr(self, name)!r}"
                )

    def replace(self, **changes: Any) -> QwenConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    # -- parameter counts --

    def num_params(self) -> int:
        """Parameters of the model, embeddings included (tied ones counted once)."""
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_embeddings else embed
        return embed + head + self.num_layers * self._layer_params() + self.hidden_size

    def num_non_embedding_params(self) -> int:
        """Parameters outside the embedding and LM head (as model cards report them)."""
        return self.num_layers * self._layer_params() + self.hidden_size

    def _layer_params(self) -> int:
        h, d = self.hidden_size, self.head_dim
        q, kv = self.num_heads * d, self.num_kv_heads * d
        attn = h * q + 2 * h * kv + q * h
        if self.qkv_bias:
            attn += q + 2 * kv
        if self.qk_norm:
            attn += 2 * d
        mlp = 3 * h * self.intermediate_size
        return attn + mlp + 2 * h

    # -- Hugging Face config.json --

    @classmethod
    def from_hf(cls, hf: dict[str, Any], **overrides: Any) -> QwenConfig:
        """Reads a Hugging Face ``config.json`` dict.

        Raises:
            ValueError: an unknown architecture, or a feature this model does not have
                (sliding-window attention, RoPE scaling); the message names the key.
        """
        model_type = hf.get("model_type")
        if model_type not in _HF_ARCHITECTURES:
            archs = hf.get("architectures")
            raise ValueError(
                f"unknown architecture model_type={model_type!r} (architectures={archs}); "
                f"supported: {', '.join(_HF_ARCHITECTURES)}"
            )
        if hf.get("use_sliding_window"):
            raise ValueError("use_sliding_window=true is not supported (no Qwen release uses it)")
        # transformers ≥ 5 writes rope_parameters; earlier versions rope_theta/rope_scaling.
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"RoPE scaling {rope!r} is not supported yet (only 'default')")
        rope_theta = hf.get("rope_theta", rope.get("rope_theta", 10000.0))
        heads = hf["num_attention_heads"]
        qwen3 = model_type == "qwen3"
        fields = dict(
            architecture=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads", heads),
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            rope_theta=float(rope_theta),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=bool(hf.get("attention_bias", not qwen3)),
            qk_norm=qwen3,
            max_position_embeddings=hf.get("max_position_embeddings", 32768),
        )
        fields.update(overrides)
        return cls(**fields)

    def to_hf(self) -> dict[str, Any]:
        """A Hugging Face ``config.json`` dict that ``transformers`` loads."""
        hf: dict[str, Any] = {
            "architectures": [_HF_ARCHITECTURES[self.architecture]],
            "model_type": self.architecture,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_embeddings,
            "attention_bias": self.qkv_bias,
            "attention_dropout": 0.0,
            "max_position_embeddings": self.max_position_embeddings,
            "use_sliding_window": False,
            "torch_dtype": self.param_dtype,
        }
        return hf

    # -- named sizes (published config.json values) --

    @classmethod
    def tiny(cls, architecture: Architecture = "qwen2", **overrides: Any) -> QwenConfig:
        """A two-layer model for tests and the quickstart (~0.2M parameters)."""
        fields = dict(
            architecture=architecture,
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            head_dim=16,
            tie_embeddings=True,
            qkv_bias=architecture == "qwen2",
            qk_norm=architecture == "qwen3",
            max_position_embeddings=2048,
        )
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def preset(cls, name: str) -> QwenConfig:
        """The named size ``name`` (a key of :data:`PRESETS`).

        Raises:
            ValueError: no preset has that name; the message lists them.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
        return PRESETS[name]()


def _qwen2_5(**sizes: Any) -> QwenConfig:
    """A Qwen2.5 / QwQ size: q/k/v biases, Qwen2's defaults for the rest."""
    return QwenConfig(architecture="qwen2", **sizes)


def _qwen3(**sizes: Any) -> QwenConfig:
    """A Qwen3 size: no q/k/v biases, per-head q/k norms, the family's shared vocabulary,
    head width and context."""
    return QwenConfig(
        architecture="qwen3",
        vocab_size=151936,
        head_dim=128,
        qkv_bias=False,
        qk_norm=True,
        max_position_embeddings=40960,
        **sizes,
    )


# QwQ-32B is Qwen2.5-32B's architecture with a longer context: one set of sizes for both.
_QWEN2_5_32B = dict(
    vocab_size=152064, hidden_size=5120, intermediate_size=27648, num_layers=64,
    num_heads=40, num_kv_heads=8, head_dim=128, tie_embeddings=False,
)  # fmt: skip

PRESETS: dict[str, Callable[[], QwenConfig]] = {
    # -- for tests and the quickstart --
    "tiny": QwenConfig.tiny,
    "tiny-qwen3": partial(QwenConfig.tiny, "qwen3"),
    # -- Qwen2.5 (model card: parameters, non-embedding parameters) --
    # Qwen2.5's config.json has no head_dim: it is hidden_size // num_heads.
    "qwen2_5_0_5b": partial(  # 0.49B, 0.36B
        _qwen2_5, vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
        num_heads=14, num_kv_heads=2, head_dim=64, tie_embeddings=True,
    ),
    "qwen2_5_1_5b": partial(  # 1.54B, 1.31B
        _qwen2_5, vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
        num_heads=12, num_kv_heads=2, head_dim=128, tie_embeddings=True,
    ),
    "qwen2_5_3b": partial(  # 3.09B, 2.77B
        _qwen2_5, vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_layers=36,
        num_heads=16, num_kv_heads=2, head_dim=128, tie_embeddings=True,
    ),
    "qwen2_5_7b": partial(  # 7.61B, 6.53B
        _qwen2_5, vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
        num_heads=28, num_kv_heads=4, head_dim=128, tie_embeddings=False,
    ),
    "qwen2_5_14b": partial(  # 14.7B, 13.1B
        _qwen2_5, vocab_size=152064, hidden_size=5120, intermediate_size=13824, num_layers=48,
        num_heads=40, num_kv_heads=8, head_dim=128, tie_embeddings=False,
    ),
    "qwen2_5_32b": partial(_qwen2_5, **_QWEN2_5_32B),  # 32.5B, 31.0B
    # The seed system's model.
    "qwq_32b": partial(_qwen2_5, **_QWEN2_5_32B, max_position_embeddings=40960),
    # -- Qwen3 (model card: parameters, non-embedding parameters) --
    "qwen3_0_6b": partial(  # 0.6B, 0.44B
        _qwen3, hidden_size=1024, intermediate_size=3072, num_layers=28, num_heads=16,
        num_kv_heads=8, tie_embeddings=True,
    ),
    "qwen3_1_7b": partial(  # 1.7B, 1.4B
        _qwen3, hidden_size=2048, intermediate_size=6144, num_layers=28, num_heads=16,
        num_kv_heads=8, tie_embeddings=True,
    ),
    "qwen3_4b": partial(  # 4.0B, 3.6B
        _qwen3, hidden_size=2560, intermediate_size=9728, num_layers=36, num_heads=32,
        num_kv_heads=8, tie_embeddings=True,
    ),
    "qwen3_8b": partial(  # 8.2B, 6.95B
        _qwen3, hidden_size=4096, intermediate_size=12288, num_layers=36, num_heads=32,
        num_kv_heads=8, tie_embeddings=False,
    ),
    "qwen3_14b": partial(  # 14.8B, 13.2B
        _qwen3, hidden_size=5120, intermediate_size=17408, num_layers=40, num_heads=40,
        num_kv_heads=8, tie_embeddings=False,
    ),
    "qwen3_32b": partial(  # 32.8B, 31.2B
        _qwen3, hidden_size=5120, intermediate_size=25600, num_layers=64, num_heads=64,
        num_kv_heads=8, tie_embeddings=False,
    ),
}  # fmt: skip
"""Every named size: name → a function that builds its config (``PRESETS[name]()``).

The sizes copy the published ``config.json`` files; the comments give the parameter
counts the model cards print, which tests/models/test_qwen_config.py checks.
"""
