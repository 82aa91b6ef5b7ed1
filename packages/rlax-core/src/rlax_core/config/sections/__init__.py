"""The fixed sections of a run config, a concern a file (plugin sections: the registry)."""

from rlax_core.config.sections.base import Section
from rlax_core.config.sections.data import DataSection, DatasetConfig, template_fields
from rlax_core.config.sections.metrics import MetricsSection, WandbSection
from rlax_core.config.sections.model import ModelSection
from rlax_core.config.sections.rollout import (
    EngineSection,
    RolloutSection,
    StalenessSection,
    TurnsSection,
)
from rlax_core.config.sections.run import RunSection
from rlax_core.config.sections.schedule import CheckpointSection, EvalSection, WarmStartSection
from rlax_core.config.sections.training import AlgorithmSection, MeshSection, TrainerSection

__all__ = [
    "AlgorithmSection",
    "CheckpointSection",
    "DataSection",
    "DatasetConfig",
    "EngineSection",
    "EvalSection",
    "MeshSection",
    "MetricsSection",
    "ModelSection",
    "RolloutSection",
    "RunSection",
    "Section",
    "StalenessSection",
    "TrainerSection",
    "TurnsSection",
    "WandbSection",
    "WarmStartSection",
    "template_fields",
]
