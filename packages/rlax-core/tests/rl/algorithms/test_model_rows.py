"""The model rows of a training batch: a row per sequence, or a row per shared prompt."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rlax_core.models import QwenConfig
from rlax_core.rl.algorithms.batch import build_batch, loss_positions
from rlax_core.rl.algorithms.model_rows import choose_rows, shared_prompt_mask, shared_prompt_rows
from rlax_core.types import Rollout, RolloutGroup


def _groups(prompts: list[list[int]], completions: list[list[list[int]]]) -> list[RolloutGroup]:
    groups = []
    for g, (prompt, samples) in enumerate(zip(prompts, completions, strict=True)):
        rollouts = tuple(
            Rollout(rollout_id=f"g{g}/{j}", completion_tokens=tuple(c),
                    behaviour_logprobs=tuple([-1.0] * len(c)), finish_reason="stop",
                    reward=float(j))
            for j, c in enumerate(samples)
        )  # fmt: skip
        groups.append(RolloutGroup(group_id=f"g{g}", prompt_id=f"p{g}", prompt_tokens=tuple(prompt),
                                   policy_version=0, worker_id="w", rollouts=rollouts))  # fmt: skip
    return groups


def test_a_group_row_holds_the_prompt_once_then_each_completion() -> None:
    batch, _ = build_batch(
        _groups([[1, 2, 3], [4]], [[[10, 11], [12, 13, 14]], [[20], [21, 22]]]), advantage="grpo"
    )
    positions = loss_positions(batch.loss_mask, max_new_tokens=3)
    rows = shared_prompt_rows(batch, positions)
    assert rows is not None and rows.per_row == 2 and rows.count == 2
    np.testing.assert_array_equal(rows.tokens[0, :8], [1, 2, 3, 10, 11, 12, 13, 14])
    np.testing.assert_array_equal(rows.segments[0, :8], [0, 0, 0, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(rows.rope[0, :8], [0, 1, 2, 3, 4, 3, 4, 5])  # restarts
    np.testing.assert_array_equal(rows.tokens[1, :4], [4, 20, 21, 22])
    assert (rows.segments[:, 8:] == -1).all() and not rows.valid[:, 8:].any()
    # Sample 1 of group 0 (targets 12, 13, 14): scored on the prompt's last token, then
    # on its own tokens 12 and 13; each logit position is scored on the right target.
    w = positions.shape[1]
    at, targets = rows.logits_at[0, w:], rows.targets[0, w:]
    counted = batch.loss_mask[1, positions[1]]
    np.testing.assert_array_equal(at[counted], [2, 5, 6])
    np.testing.assert_array_equal(targets[counted], [12, 13, 14])


def test_groups_of_unequal_size_or_single_samples_stay_plain() -> None:
    uneven, _ = build_batch(_groups([[1], [2]], [[[3], [4]], [[5]]]), advantage="grpo")
    single, _ = build_batch(_groups([[1], [2]], [[[3]], [[5]]]), advantage="grpo")
    for batch in (uneven, single):
        assert shared_prompt_rows(batch, loss_positions(batch.loss_mask, 1)) is None


def test_the_layout_with_fewer_flops_is_chosen() -> None:
    config = QwenConfig.tiny()
    prompt = list(range(1, 40))
    short, _ = build_batch(_groups([prompt], [[[5, 6]] * 8]), advantage="grpo")
    long, _ = build_batch(_groups([[1]], [[list(range(2, 300))] * 8]), advantage="grpo")
    for batch, shared in ((short, True), (long, False)):
        positions = loss_positions(batch.loss_mask, 300)
        assert (choose_rows(batch, positions, config, share_prompts=True).per_row > 1) == shared
        assert choose_rows(batch, positions, config, share_prompts=False).per_row == 1


def test_completions_see_the_prompt_and_themselves_only() -> None:
    mask = np.asarray(shared_prompt_mask(jnp.asarray([[0, 0, 1, 1, 2, -1]])))[0]
    assert mask[3].tolist() == [True, True, True, True, False, False]
    assert mask[4].tolist() == [True, True, False, False, True, False]
    assert mask[1].tolist() == [True, True, False, False, False, False]
    assert not mask[:, 5].any()
