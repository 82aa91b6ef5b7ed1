"""What a run will touch, checked before anything starts, every problem at once.

``rlax config check``, ``rlax train`` and ``rlax launch --apply`` run these checks: a
valid config (types, ranges) can still name a dataset that is missing or whose rows lack
the template's fields, a truncated checkpoint or one that does not match its
``config.json``, a tokenizer that does not load or has no chat template when one is
asked for, a mesh larger than the devices. Each check reads as little as it can (a
dataset's first rows, a checkpoint's headers), and one failing does not hide the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rlax_core.config.run_config import RunConfigBase
from rlax_core.errors import ConfigError, RlaxError
from rlax_core.rl.roles import components

T = TypeVar("T")
PREVIEW_ROWS = 16  # rows of each dataset read to check their fields


def preflight(config: RunConfigBase, config_dir: Path, *, devices: bool) -> list[str]:
    """The problems the run would meet on starting; empty when none.

    Args:
        devices: also check the trainer's mesh against this machine's devices (not for a
            launch: the devices are on the cloud machines).
    """
    from rlax_core.models import PRESETS

    problems: list[str] = []
    tokenizer = _attempt(problems, lambda: components.load_tokenizer(config, config_dir))
    if tokenizer is not None and config.rollout.chat_template and not tokenizer.chat_template:
        problems.append(components.NO_CHAT_TEMPLATE)
    section = config.model
    if section.path is not None:
        from rlax_core.models.pretrained import inspect_pretrained

        path = components.resolve(section.path, config_dir)
        model = _attempt(problems, lambda: inspect_pretrained(path))
    else:
        model = dataclasses.replace(PRESETS[section.preset](), **section.overrides)
    if model is not None and tokenizer is not None:
        _attempt(problems, lambda: components.check_vocabulary(model.vocab_size, tokenizer))
    if model is not None and config.rollout.max_new_tokens >= model.max_position_embeddings:
        problems.append(
            f"rollout.max_new_tokens: {config.rollout.max_new_tokens} tokens do not fit the "
            f"model's context of {model.max_position_embeddings} positions "
            "(max_position_embeddings); generate fewer"
        )
    if config.data is not None:
        from rlax_core.data.dataset import PromptDataset

        for dataset in (*config.data.train, config.data.eval):
            if dataset is None or dataset.path is None:
                continue  # prompt sources make their examples when the run starts
            preview = dataset.model_copy(update={"limit": min(dataset.limit or PREVIEW_ROWS,
                                                              PREVIEW_ROWS)})  # fmt: skip
            _attempt(problems, lambda d=preview: PromptDataset.load(d, config_dir))
    if devices:
        _attempt(problems, lambda: components.mesh_of(config))
    return problems


def check_before_starting(config: RunConfigBase, config_dir: Path, source: str, *,
                          devices: bool) -> None:  # fmt: skip
    """Runs :func:`preflight`; raises one :class:`ConfigError` listing every problem."""
    problems = preflight(config, config_dir, devices=devices)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        raise ConfigError(
            f"{source}: the run cannot start ({count}); nothing was started:\n{listed}"
        )


def _attempt(problems: list[str], check: Callable[[], T]) -> T | None:
    """``check()``, or None with its error's message added to ``problems``."""
    try:
        return check()
    except RlaxError as exc:
        problems.append(str(exc))
    except Exception as exc:  # a bucket out of reach, refused credentials: still a report
        problems.append(f"{type(exc).__name__}: {exc}")
    return None
