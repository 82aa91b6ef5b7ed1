"""The policy model: a named size or a Hugging Face checkpoint, its dtypes and remat."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rlax_core.config.sections.base import Section


class ModelSection(Section):
    """The policy model: a named size or a Hugging Face checkpoint directory."""

    preset: str | None = Field(
        default=None,
        description="Named model size, e.g. 'tiny' or 'qwen2_5_0_5b' (random initialisation).",
    )
    path: str | None = Field(
        default=None,
        description="Directory with config.json, *.safetensors and tokenizer.json: local, "
        "gs://… or s3://….",
    )
    random_init: bool = Field(
        default=False,
        description="A cloud launch of a preset (random weights) on purpose: without it, "
        "`rlax launch` refuses a preset, which is nearly always a forgotten model.path.",
    )
    dtype: Literal["float32", "bfloat16"] = Field(default="float32", description="Parameter dtype.")
    activation_dtype: Literal["float32", "bfloat16"] | None = Field(
        default=None,
        description="Dtype of activations and matmuls (default: the parameter dtype); norms, "
        "softmax and logits stay fp32.",
    )
    remat: bool = Field(
        default=False, description="Rematerialise layer activations in the backward pass."
    )
    overrides: dict[str, int | float | bool] = Field(
        default_factory=dict,
        description="Changes to the preset's sizes, e.g. {num_layers: 4, hidden_size: 128}.",
    )
    tokenizer: str | None = Field(
        default=None,
        description="Directory with tokenizer.json (default: model.path): local, gs://… or "
        "s3://…. Relative paths are relative to the run config file.",
    )

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, preset: str | None) -> str | None:
        from rlax_core.models.qwen.config import PRESETS  # imports JAX: only when validating

        if preset is not None and preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        return preset

    @field_validator("overrides")
    @classmethod
    def _known_sizes(cls, overrides: dict) -> dict:
        import dataclasses

        from rlax_core.models.qwen.config import QwenConfig

        known = {f.name for f in dataclasses.fields(QwenConfig)} - {"architecture"}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown model sizes {unknown}; known: {', '.join(sorted(known))}")
        return overrides

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        if self.path is not None and self.preset is not None:
            raise ValueError(
                f"model.preset ({self.preset!r}) and model.path ({self.path!r}) are both set; "
                "give one of them"
            )
        if self.path is None and self.preset is None:
            raise ValueError("give model.preset (a named size) or model.path (a checkpoint)")
        return self
