"""Loading and validating run configs: the only way a run config enters RLAX."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlax_core.config.messages import describe_validation_error
from rlax_core.config.overrides import merge_overrides
from rlax_core.config.run_config import RunConfigBase, run_config_model
from rlax_core.config.yaml_source import YamlDocument, read_yaml_mapping
from rlax_core.errors import ConfigError
from rlax_core.plugins.registry import Registry


def load_run_config(
    path: str | Path,
    registry: Registry | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> RunConfigBase:
    """Reads and validates a YAML run config against the installed plugins.

    Args:
        path: the YAML file.
        registry: the plugins to validate against (default: everything installed).
        overrides: settings that replace the file's (``--set``; see
            :mod:`rlax_core.config.overrides`).

    Returns:
        The validated RunConfig instance.

    Raises:
        ConfigError: one message naming the file, each bad field's path and line, the bad
            value and what is allowed. Nothing has been started.
    """
    doc = read_yaml_mapping(path)
    if overrides:
        merge_overrides(doc.data, overrides)
    return validate_run_config(doc.data, registry, doc=doc)


def validate_run_config(
    data: dict[str, Any], registry: Registry | None = None, *, doc: YamlDocument | None = None
) -> RunConfigBase:
    """Validates a run config given as a mapping (see :func:`load_run_config`)."""
    if registry is None:
        from rlax_core.plugins.manager import load_registry

        registry = load_registry()
    model = run_config_model(registry)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        source = str(doc.path) if doc else "the run config"
        problems = describe_validation_error(exc, model, data, doc)
        count = exc.error_count()
        raise ConfigError(
            f"{source} is not a valid run config ({count} problem{'s' if count > 1 else ''}):\n"
            f"{problems}"
        ) from None
