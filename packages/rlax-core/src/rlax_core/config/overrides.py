"""``--set KEY=VALUE`` overrides: one mechanism for every command that reads settings.

``rlax train``, ``rlax launch`` and ``rlax config check`` apply them to the run config
before it is validated; ``rlax serve`` to the transport settings. ``VALUE`` is read as
YAML (``--set trainer.learning_rate=1e-5``, ``--set eval.ks=[1,8]``); dots in ``KEY``
reach into nested sections.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rlax_core.errors import ConfigError


def add_set_argument(parser: argparse.ArgumentParser, what: str = "one run-config setting") -> None:
    """Adds the repeatable ``--set KEY=VALUE`` option (into ``args.overrides``)."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override {what}, e.g. trainer.learning_rate=1e-5 (VALUE is read as YAML); "
        "repeatable",
    )


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``["port=5000", "server.state_dir=/x"]`` → ``{"port": 5000, "server": {"state_dir": "/x"}}``.

    Raises:
        ConfigError: a pair has no ``=``, its value is not YAML, or it sets a key below
            one another pair set to a value.
    """
    result: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        *parents, leaf = key.strip().split(".")
        node = result
        for parent in parents:
            node = node.setdefault(parent, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {pair!r}: {parent!r} is set to a value already")
        try:
            node[leaf] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or exc
            raise ConfigError(f"--set {pair!r}: the value is not YAML ({problem})") from None
    return result


def write_overridden(path: Path, overrides: Mapping[str, Any]) -> Path:
    """A copy of the run config file ``path`` with ``overrides`` in it, for processes that
    read the config by file name (a launcher's). It is written beside ``path``
    (``.NAME.set-HASH.yaml``), so the relative paths in it still start where they did."""
    from rlax_core.config.yaml_source import read_yaml_mapping

    data = merge_overrides(read_yaml_mapping(path).data, overrides)
    text = yaml.safe_dump(data, sort_keys=False)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    target = path.resolve().with_name(f".{path.stem}.set-{digest}.yaml")
    target.write_text(f"# {path.name} with --set {json.dumps(overrides)}\n{text}")
    return target


def merge_overrides(settings: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Puts ``overrides`` into ``settings`` (in place, nested mappings merged); returns it."""
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(settings.get(key), dict):
            merge_overrides(settings[key], value)
        else:
            settings[key] = value
    return settings
