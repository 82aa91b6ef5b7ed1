"""The init container of a GKE pod: run config + transport credentials → the config pods read.

``python -m rlax_launchers.gke.config_merge BASE CREDENTIALS OUT`` reads the ConfigMap's
run config (``BASE``), puts the Secret's credentials (``CREDENTIALS``, a YAML mapping of
transport settings such as ``token``) into its ``transport`` section and writes ``OUT``
(mode 600, in a memory-backed volume). Exit status 2, with one line saying why, when a
file is missing or is not a YAML mapping.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rlax_launchers.cluster_config import merge_inline_credentials, run_config_yaml


def main(argv: Sequence[str] | None = None) -> int:
    """Merges; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        print(
            "usage: python -m rlax_launchers.gke.config_merge BASE CREDENTIALS OUT", file=sys.stderr
        )
        return 2
    base, credentials, out = (Path(a) for a in args)
    try:
        settings = _mapping(base)
        merge_inline_credentials(settings, _mapping(credentials))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(run_config_yaml(settings))
    return 0


def _mapping(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a YAML mapping")
    return data


if __name__ == "__main__":
    sys.exit(main())
