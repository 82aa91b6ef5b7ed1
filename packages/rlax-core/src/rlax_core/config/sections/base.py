"""The base of every config section: unknown keys and non-finite numbers are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors, and so are infinite and NaN numbers
    (``learning_rate: .inf`` passes ``gt=0`` otherwise)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
