"""The run config: pydantic models, YAML loading and error messages."""

from rlax_core.config.loading import load_run_config, validate_run_config
from rlax_core.config.run_config import (
    RunConfigBase,
    VerifierSectionBase,
    make_run_config_model,
    run_config_model,
)

__all__ = [
    "RunConfigBase",
    "VerifierSectionBase",
    "load_run_config",
    "make_run_config_model",
    "run_config_model",
    "validate_run_config",
]
