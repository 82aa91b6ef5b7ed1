"""The run config model, assembled from the fixed sections and the installed plugins.

Plugin sections (``transport``, ``verifier.judge``, ``verifier.sandbox``,
``environment``, ``launcher``)
are discriminated unions on ``type`` over the config classes that plugins registered,
so ``rlax config schema`` and validation always match what is installed. The model is
built at run time (:func:`run_config_model`), but code is typed against its static
base, :class:`RunConfigBase`: the fixed sections with their own types, the plugin
sections as ``BaseModel``, so a misspelled field is a type error.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, model_validator

from rlax_core.config.sections import (
    AlgorithmSection,
    CheckpointSection,
    DataSection,
    EvalSection,
    MetricsSection,
    ModelSection,
    RolloutSection,
    RunSection,
    StalenessSection,
    TrainerSection,
    WarmStartSection,
)
from rlax_core.rl.algorithms.advantages import GROUP_ADVANTAGES

if TYPE_CHECKING:
    from rlax_core.plugins.registry import Registry

PLUGIN_KIND_KEY = "x-rlax-plugin-kind"


class VerifierSectionBase(BaseModel):
    """How completions are judged: a judge, the sandbox it runs code in, and where.

    ``judge`` and ``sandbox`` are the installed judges' and sandboxes' config classes
    (see :func:`make_run_config_model`; declared here for type checkers only).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # inline by default, as measured by `rlax bench verify_stage`: with a cheap judge (the
    # math quickstart) one verifier thread ran at 0.78x of inline judging; where judging
    # takes time (code through Lambda, +0.5 s / +2 s an invocation) the stage ran at
    # 1.68x / 1.89x of inline at k = 1. benchmarks/README.md has the table.
    placement: Literal["inline", "stage"] = Field(
        default="inline",
        description="inline: each inference worker judges its own completions (best for a "
        "cheap judge); stage: workers hand them to verifiers (threads of the embedded run, "
        "or `--role verifier` processes) and go straight back to sampling (best where "
        "judging takes time: sandboxes, remote calls).",
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Verifier threads of the embedded run (placement: stage).",
    )
    groups_per_batch: int = Field(
        default=4, ge=1, description="Rollout groups a verifier judges in one call."
    )

    if TYPE_CHECKING:
        judge: BaseModel
        sandbox: BaseModel | None


class RunConfigBase(BaseModel):
    """An RLAX run: what to train, how to sample and judge, and where it runs."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    run: RunSection = Field(default_factory=RunSection, description="Run identity and seed.")
    model: ModelSection = Field(
        default_factory=lambda: ModelSection(preset="tiny"), description="The policy model."
    )
    rollout: RolloutSection = Field(default_factory=RolloutSection, description="Sampling.")
    staleness: StalenessSection = Field(
        default_factory=StalenessSection, description="Staleness bound (on/off-policy)."
    )
    algorithm: AlgorithmSection = Field(
        default_factory=AlgorithmSection, description="Advantage estimator and policy loss."
    )
    trainer: TrainerSection = Field(default_factory=TrainerSection, description="Optimiser.")
    data: DataSection | None = Field(
        default=None,
        description="Prompt datasets: the training mixture and the held-out set "
        "(required by `rlax train`).",
    )
    eval: EvalSection = Field(
        default_factory=EvalSection, description="Evaluation on held-out prompts."
    )
    checkpoint: CheckpointSection = Field(
        default_factory=CheckpointSection, description="When the RL state is saved."
    )
    warm_start: WarmStartSection = Field(
        default_factory=WarmStartSection, description="Supervised stage before RL."
    )
    metrics: MetricsSection = Field(
        default_factory=MetricsSection,
        description="Where the step metrics go besides metrics.jsonl and TensorBoard.",
    )

    if TYPE_CHECKING:
        # The plugin sections, added by make_run_config_model for the installed plugins.
        transport: BaseModel
        verifier: VerifierSectionBase | None
        environment: BaseModel
        launcher: BaseModel | None

    @model_validator(mode="after")
    def _groups_fit_the_advantage(self) -> RunConfigBase:
        if self.algorithm.advantage in GROUP_ADVANTAGES and self.rollout.samples_per_prompt < 2:
            raise ValueError(
                f"algorithm.advantage {self.algorithm.advantage!r} compares the completions of "
                f"one prompt, but rollout.samples_per_prompt is "
                f"{self.rollout.samples_per_prompt}; use samples_per_prompt ≥ 2 or "
                "advantage 'reinforce'"
            )
        return self


def plugin_field(
    registry: Registry, kind: str, *, default: Any, description: str
) -> tuple[Any, Any]:
    """The (annotation, FieldInfo) of a config field selecting one plugin of ``kind``.

    ``default`` is ``...`` for a required field, None for an optional one, or a factory.
    """
    members = tuple(r.config_cls for r in registry.all() if r.kind == kind)
    extra = {PLUGIN_KIND_KEY: kind}
    if members:
        annotation: Any = Annotated[Union[members], Field(discriminator="type")]  # noqa: UP007
    else:
        annotation = Annotated[Any, BeforeValidator(_none_installed(kind))]
    if default is ...:
        info = Field(description=description, json_schema_extra=extra)
    elif default is None:
        annotation = annotation | None
        info = Field(default=None, description=description, json_schema_extra=extra)
    else:
        info = Field(default_factory=default, description=description, json_schema_extra=extra)
    return annotation, info


def _none_installed(kind: str) -> Any:
    def fail(value: Any) -> Any:
        if value is None:
            return value
        raise ValueError(
            f"no {kind} plugins are installed, so this section cannot be used; install one "
            "(e.g. pip install rlax-verifiers) and check with `rlax plugins`"
        )

    return fail


_MODELS: weakref.WeakKeyDictionary[Registry, tuple[tuple, type[RunConfigBase]]] = (
    weakref.WeakKeyDictionary()
)


def run_config_model(registry: Registry) -> type[RunConfigBase]:
    """The RunConfig model whose plugin sections accept exactly ``registry``'s plugins.

    Built once per registry and set of registrations (a registration added later builds
    a new one).
    """
    key = tuple((r.kind, r.name, r.config_cls) for r in registry.all())
    cached = _MODELS.get(registry)
    if cached is None or cached[0] != key:
        cached = (key, make_run_config_model(registry))
        _MODELS[registry] = cached
    return cached[1]


def make_run_config_model(registry: Registry) -> type[RunConfigBase]:
    """Builds the RunConfig model for the plugins in ``registry`` (see :func:`run_config_model`)."""
    verifier = create_model(
        "VerifierSection",
        __base__=VerifierSectionBase,
        __doc__=VerifierSectionBase.__doc__,
        judge=plugin_field(
            registry,
            "judge",
            default=...,
            description="The judge (reward function) that decides each completion's verdict.",
        ),
        sandbox=plugin_field(
            registry,
            "sandbox",
            default=None,
            description="Where code is executed, for judges that run code.",
        ),
    )
    default_transport = (
        (lambda: registry.get("transport", "inproc").config_cls())
        if "inproc" in registry.names("transport")
        else None
    )
    default_environment = (
        (lambda: registry.get("environment", "single_turn").config_cls())
        if "single_turn" in registry.names("environment")
        else None
    )
    return create_model(
        "RunConfig",
        __base__=RunConfigBase,
        __doc__=RunConfigBase.__doc__,
        transport=plugin_field(
            registry,
            "transport",
            default=default_transport,
            description="How processes share weights and queues (default: inproc).",
        ),
        verifier=(
            verifier | None,
            Field(default=None, description="How completions are judged."),
        ),
        environment=plugin_field(
            registry,
            "environment",
            default=default_environment,
            description="What answers the model's turns: single_turn (one prompt, one answer, "
            "the default), tools, or an installed environment plugin.",
        ),
        launcher=plugin_field(
            registry,
            "launcher",
            default=None,
            description="Where the run's processes are placed (default: this process).",
        ),
    )
