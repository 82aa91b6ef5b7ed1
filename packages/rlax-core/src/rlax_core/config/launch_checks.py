"""What a cloud launch refuses before it creates anything: a run config that renders but
could not train in the pods or VMs.

Each problem names the field and what to do; :func:`cloud_launch_problems` returns them
all at once (``rlax launch`` prints them and exits 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rlax_core.config.run_config import RunConfigBase
from rlax_core.storage import is_remote

# Strings the shipped cloud examples hold where the user's own names go.
PLACEHOLDERS = ("my-bucket", "my-project")


def config_paths(config: RunConfigBase) -> Iterator[tuple[str, str]]:
    """(field, value) of every file or folder the run reads (the launchers check
    ``run.run_dir`` themselves: where it must be depends on how they share it)."""
    if config.model.path:
        yield "model.path", config.model.path
    if config.model.tokenizer:
        yield "model.tokenizer", config.model.tokenizer
    if config.data is not None:
        for index, dataset in enumerate(config.data.train):
            if dataset.path:
                yield f"data.train[{index}].path", dataset.path
        if config.data.eval is not None and config.data.eval.path:
            yield "data.eval.path", config.data.eval.path


def cloud_launch_problems(config: RunConfigBase, *, creating: bool) -> list[str]:
    """Why ``config`` would not train once a cloud launcher placed it; empty if nothing.

    Args:
        creating: the launch creates resources now (``--apply``): placeholders left from
            the examples are refused too (a dry run only shows what would be made).
    """
    problems = []
    for field, value in config_paths(config):
        if not is_remote(value) and not value.startswith("/"):
            problems.append(
                f"{field}: {value!r} is a path on this machine, which will not exist on "
                "the cloud machines; upload it to a bucket and give its gs:// URL"
            )
    if config.model.path is None and not config.model.random_init:
        problems.append(
            f"model.preset: {config.model.preset!r} starts the policy from random weights; "
            "give model.path (a checkpoint in a bucket, e.g. gs://BUCKET/models/"
            "Qwen2.5-7B-Instruct), or set model.random_init: true to train from scratch"
        )
    if config.model.path is None and config.model.tokenizer is None:
        problems.append("model.tokenizer: not set, and no model.path to take it from")
    if config.data is None or not config.data.train:
        problems.append("data.train: no training data; add a dataset in a bucket")
    if creating:
        for field, value in _strings(config.model_dump(mode="json")):
            if any(p in value for p in PLACEHOLDERS):
                problems.append(
                    f"{field}: {value!r} still holds the example's placeholder; put your "
                    "own bucket, project or image there"
                )
    return problems


def _strings(node: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, f"{prefix}{key}.")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, f"{prefix.rstrip('.')}[{index}].")
    elif isinstance(node, str):
        yield prefix.rstrip("."), node
