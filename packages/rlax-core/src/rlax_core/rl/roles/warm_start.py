"""The warm start: a short supervised stage that teaches the answer format before RL.

Each example becomes ``prompt + target + EOS`` with the target from the warm-start
section's template over the example's problem; the loss is the cross-entropy of the
target and EOS tokens only. With ``warm_start.turns`` the target is a demonstration of
several model turns, played through the run's environment as a rollout would be: each
turn but the last is answered by the environment, its reply rendered and tokenized as
the worker does, and kept out of the loss. It runs on the learner's model before the
first RL step, so evaluation at RL step 0 measures the warm-started policy and later
gains are RL's own.
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
from rlax_core.contracts.environment import Environment, Turn
from rlax_core.environments.chat import reply_text
from rlax_core.errors import ConfigError
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.algorithms.batch import padded_length

Demonstrate = Callable[[dict[str, Any]], tuple[list[int], list[bool]]]


def warm_start(
    model: Qwen,
    next_example: Callable[[], tuple[list[int], dict[str, Any]]],
    demonstrate: Demonstrate,
    config: WarmStartSection,
    on_step: Callable[[int, float], None] | None = None,
) -> Qwen:
    """Trains ``model`` for ``config.steps`` supervised steps; returns the trained model.

    Args:
        next_example: returns (prompt token ids, problem) of the next training example.
        demonstrate: a problem → the tokens taught after its prompt, and which of them
            are in the loss (:func:`target` or :func:`demonstration`).
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
            sequences.append((prompt, *demonstrate(problem)))
        length = padded_length(max(len(p) + len(t) for p, t, _ in sequences))
        tokens = np.zeros((len(sequences), length), np.int32)
        valid = np.zeros((len(sequences), length), bool)
        target_mask = np.zeros((len(sequences), length - 1), np.float32)
        for row, (prompt, target, taught) in enumerate(sequences):
            tokens[row, : len(prompt) + len(target)] = prompt + target
            valid[row, : len(prompt) + len(target)] = True
            target_mask[row, len(prompt) - 1 : len(prompt) - 1 + len(target)] = taught
        params, opt_state, loss = step(params, opt_state, tokens, valid, target_mask)
        if on_step is not None:
            on_step(i + 1, float(loss))
    return nnx.merge(graphdef, params)


def target(
    template: str, encode: Callable[[str], list[int]], eos_token_id: int, *, field: str
) -> Demonstrate:
    """A single-turn target: ``template`` over the problem, then EOS, all taught."""

    def demonstrate(problem: dict[str, Any]) -> tuple[list[int], list[bool]]:
        tokens = [*encode(_fill(template, problem, field)), eos_token_id]
        return tokens, [True] * len(tokens)

    return demonstrate


def demonstration(
    turns: list[str], environment: Environment, tokenizer: Tokenizer, end_of_turn: int
) -> Demonstrate:
    """A multi-turn demonstration: each of ``turns`` (templates over the problem) is a
    model turn ended by ``end_of_turn`` and taught; the environment answers each but the
    last, and its reply, rendered as the worker renders it, is not taught. An episode
    that ends early ends its demonstration there."""

    def demonstrate(problem: dict[str, Any]) -> tuple[list[int], list[bool]]:
        tokens: list[int] = []
        taught: list[bool] = []
        episode = environment.start(problem)
        try:
            for i, template in enumerate(turns):
                text = _fill(template, problem, f"warm_start.turns[{i}]")
                turn = [*tokenizer.encode(text), end_of_turn]
                tokens, taught = tokens + turn, taught + [True] * len(turn)
                if i + 1 == len(turns):
                    break
                step = episode.take(Turn(text=text))
                if step.done:
                    break
                reply = tokenizer.encode(reply_text(step.messages, turn_closed=True))
                tokens, taught = tokens + reply, taught + [False] * len(reply)
        finally:
            episode.close()
        return tokens, taught

    return demonstrate


def _fill(template: str, problem: dict[str, Any], field: str) -> str:
    try:
        return template.format(**problem)
    except (KeyError, IndexError) as exc:
        raise ConfigError(
            f"{field} {template!r} needs {exc}, which the problem {problem!r} lacks"
        ) from None
