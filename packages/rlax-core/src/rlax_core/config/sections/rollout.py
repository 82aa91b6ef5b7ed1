"""How completions are sampled, and how stale a rollout may be when it is trained on.

Every field says what it counts: ``prompts_per_step`` counts prompts, ``samples_per_prompt``
completions per prompt, ``max_new_tokens`` tokens per completion. There is no bare
``batch_size`` anywhere.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlax_core.config.sections.base import Section


class EngineSection(Section):
    """What generates a worker's completions.

    ``static`` samples a batch of ``groups_per_batch`` groups at a time, the batch
    decoding until its longest completion ends. ``paged`` is the rollout engine
    (:mod:`rlax_core.generate.paged`): continuous batching over a paged KV cache, the
    worker leasing groups as slots free up and sending each group the moment its
    samples have all finished.
    """

    kind: Literal["static", "paged"] = Field(
        default="static", description="static: batch at a time; paged: the rollout engine."
    )
    slots: int = Field(default=16, ge=1, le=4096, description="paged: sequences decoding at once.")
    block_size: int = Field(
        default=16, ge=1, le=1024, description="paged: token positions per KV block."
    )
    prefill_chunk: int = Field(
        default=128,
        ge=1,
        le=65536,
        description="paged: most prompt positions prefilled in one step, beside the decoding "
        "sequences (a long prompt never stalls them for its whole length; short prompts share "
        "a chunk).",
    )
    decode_burst: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="paged: most decode steps run in one call to the device while no prompt "
        "is being prefilled (the host's bookkeeping is paid once per burst; a burst ends "
        "when a sequence finishes and other work waits for its slot; in-flight weights land "
        "between calls, so at most this many tokens after they arrive). 1: a call per token.",
    )
    contiguous_bursts: bool = Field(
        default=True,
        description="paged: a decode burst whose sequences see near-equal numbers of KV "
        "blocks gathers them once into a contiguous copy and reads that (about twice as fast "
        "as reading through the block tables on a CPU); off: every step reads the pool "
        "through the block tables (where a kernel does that).",
    )
    attention: Literal["jax", "pallas"] = Field(
        default="jax",
        description="paged: how decode steps read the KV pool. jax: plain JAX, every "
        "backend; pallas: Pallas's ragged paged attention kernel (TPU; "
        ":mod:`rlax_core.generate.paged.ragged_kernel`), with contiguous_bursts off.",
    )
    max_prompt_tokens: int = Field(
        default=2048,
        ge=1,
        le=1 << 20,
        description="paged: the longest prompt a worker takes (with max_new_tokens, a "
        "sequence's longest history).",
    )
    kv_tokens: int | None = Field(
        default=None,
        ge=1,
        description="paged: token positions the KV pool holds over all sequences (default: "
        "slots × (max_prompt_tokens + max_new_tokens), which never preempts). Less memory "
        "means admission waits and preemptions (recomputed later) when long sequences meet.",
    )
    groups_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="paged: most prompt groups a worker holds leased at once (default: "
        "groups are leased while they hold fewer samples than twice the slots).",
    )
    recompute_on_swap: bool = Field(
        default=False,
        description="With rollout.in_flight_updates: on taking new weights, drop the keys and "
        "values the older ones computed and prefill every sequence in flight again (a "
        "prefill per sequence, so that later tokens see only the new policy's keys). "
        "Default: keep them, as PipelineRL does.",
    )

    @model_validator(mode="after")
    def _a_kernel_reads_the_pool(self) -> EngineSection:
        if self.attention == "pallas" and self.contiguous_bursts:
            raise ValueError(
                "rollout.engine.attention: pallas reads the pool through its kernel, which "
                "contiguous bursts would bypass: set rollout.engine.contiguous_bursts: false"
            )
        return self


class TurnsSection(Section):
    """Limits of multi-turn rollouts (an environment that answers the model's turns), the
    same for every environment. A rollout that reaches one ends there, with the limit as
    its ``end_reason``; ``rollout.max_new_tokens`` bounds every token after the prompt,
    the environment's included."""

    max_turns: int = Field(default=8, ge=1, le=1024, description="Most model turns per rollout.")
    turn_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens the model samples in one turn (default: what "
        "max_new_tokens leaves).",
    )
    step_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Wall time an environment step (a tool call in a sandbox) may take; a "
        "step past it is cut off and the rollout ends with that reason.",
    )
    environment_threads: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="Environment steps a worker runs at once, beside its engine (a step "
        "waiting on a sandbox does not idle the engine).",
    )


class RolloutSection(Section):
    """How inference workers sample."""

    prompts_per_step: int = Field(
        default=8, ge=1, description="Prompts (groups) in one training step's batch."
    )
    samples_per_prompt: int = Field(
        default=8, ge=1, description="Completions sampled per prompt (the group size)."
    )
    max_new_tokens: int = Field(
        default=256, ge=1, le=1 << 20, description="Most tokens generated per completion."
    )
    temperature: float = Field(
        default=1.0, ge=0.0, description="Sampling temperature; 0 is greedy."
    )
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling mass (1: off).")
    top_k: int = Field(default=0, ge=0, description="Keep the k most likely tokens (0: off).")
    workers: int = Field(default=1, ge=1, description="Inference workers.")
    groups_per_batch: int = Field(
        default=4,
        ge=1,
        description="Prompt groups a worker leases and samples together (its batch holds "
        "groups_per_batch × samples_per_prompt completions).",
    )
    engine: EngineSection = Field(
        default_factory=EngineSection, description="What generates the completions."
    )
    turns: TurnsSection = Field(
        default_factory=TurnsSection,
        description="Limits of multi-turn rollouts (an environment other than single_turn).",
    )
    in_flight_updates: bool = Field(
        default=False,
        description="engine.kind paged: take a newer policy version between two decode steps, "
        "keeping the sequences in flight and their KV cache (each token records the version "
        "that sampled it; the staleness bound applies to a rollout's oldest token). Off: new "
        "weights wait until the groups in flight have finished.",
    )

    @model_validator(mode="after")
    def _in_flight_needs_the_engine(self) -> RolloutSection:
        if self.in_flight_updates and self.engine.kind != "paged":
            raise ValueError(
                "rollout.in_flight_updates needs the rollout engine: set rollout.engine.kind: paged"
            )
        if self.engine.recompute_on_swap and not self.in_flight_updates:
            raise ValueError(
                "rollout.engine.recompute_on_swap acts on in-flight weight updates: set "
                "rollout.in_flight_updates: true, or drop recompute_on_swap"
            )
        return self

    chat_template: bool = Field(
        default=False,
        description="Wrap each prompt in the tokenizer's chat template as a user message.",
    )
    logprob_check_groups: int = Field(
        default=1,
        ge=0,
        description="Prompt groups of each batch a worker re-scores by teacher forcing with "
        "the same weights, to measure its sampler's log-probability gap (logprob_gap/max). "
        "It costs a forward pass over those groups' sequences (0: no check).",
    )
    lease_s: float = Field(
        default=600.0,
        gt=0.0,
        description="Seconds a lease lasts: a worker's on a prompt group (renewed once its "
        "weights are ready), and the trainer's on the rollouts it holds until a checkpoint "
        "covers them (renewed while it runs). A killed process's items come back this late.",
    )


class StalenessSection(Section):
    """How old a rollout's policy version may be when it is trained on."""

    max_staleness: int = Field(
        default=1,
        ge=0,
        description="k: the trainer at version v trains only on rollouts of versions ≥ v - k "
        "(0: synchronous on-policy).",
    )
    pull_every: int = Field(
        default=1, ge=1, description="Workers pull new weights every this many versions."
    )

    @model_validator(mode="after")
    def _pull_often_enough(self) -> StalenessSection:
        if self.pull_every > self.max_staleness + 1:
            raise ValueError(
                f"pull_every ({self.pull_every}) exceeds max_staleness + 1 "
                f"({self.max_staleness + 1}): workers would hold weights too stale to train "
                "on; lower pull_every or raise max_staleness"
            )
        return self
