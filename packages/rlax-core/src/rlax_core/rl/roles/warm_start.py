"""The warm start: a short supervised stage that teaches the answer format before RL.

Each example becomes ``prompt + target + EOS`` with the target from the warm-start
section's template over the example's problem; the loss is the cross-entropy of the
target and EOS tokens only. It runs on the learner's model before the first RL step, so
evaluation at RL step 0 measures the warm-started policy and later gains are RL's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from rlax_core.config.sections import WarmStartSection
from rlax_core.errors import ConfigError
from rlax_core.models.qwen import Qwen
from rlax_core.rl.algorithms.batch import padded_length


def warm_start(
    model: Qwen,
    next_example: Callable[[], tuple[list[int], dict[str, Any]]],
    encode: Callable[[str], list[int]],
    eos_token_id: int,
    config: WarmStartSection,
    on_step: Callable[[int, float], None] | None = None,
) -> Qwen:
    """Trains ``model`` for ``config.steps`` supervised steps; returns the trained model.

    Args:
        next_example: returns (prompt token ids, problem) of the next training example.
        encode: text → token ids.
        eos_token_id: appended to every target.
        on_step: called with (step, loss) after each step.
    """
    graphdef, params = nnx.split(model)
    tx = optax.adamw(config.learning_rate)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, tokens, valid, target_mask):
        def loss_fn(params):
            logits = nnx.merge(graphdef, params)(tokens, valid).logits[:, :-1]
            log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
            nll = -jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1)[..., 0]
            return (nll * target_mask).sum() / jnp.maximum(target_mask.sum(), 1)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    for i in range(config.steps):
        sequences = []
        for _ in range(config.examples_per_step):
            prompt, problem = next_example()
            try:
                target = config.target_template.format(**problem)
            except (KeyError, IndexError) as exc:
                raise ConfigError(
                    f"warm_start.target_template {config.target_template!r} needs {exc}, "
                    f"which the problem {problem!r} lacks"
                ) from None
            sequences.append((prompt, [*encode(target), eos_token_id]))
        length = padded_length(max(len(p) + len(t) for p, t in sequences))
        tokens = np.zeros((len(sequences), length), np.int32)
        valid = np.zeros((len(sequences), length), bool)
        target_mask = np.zeros((len(sequences), length - 1), np.float32)
        for row, (prompt, target) in enumerate(sequences):
            tokens[row, : len(prompt) + len(target)] = prompt + target
            valid[row, : len(prompt) + len(target)] = True
            target_mask[row, len(prompt) - 1 : len(prompt) - 1 + len(target)] = 1.0
        params, opt_state, loss = step(params, opt_state, tokens, valid, target_mask)
        if on_step is not None:
            on_step(i + 1, float(loss))
    return nnx.merge(graphdef, params)
