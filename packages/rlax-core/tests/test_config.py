"""Run configs: valid ones load; each kind of bad one is one clear message and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlax_core.cli.main import main
from rlax_core.config import load_run_config, validate_run_config
from rlax_core.errors import ConfigError

VALID = """\
run:
  name: demo
  seed: 3
rollout:
  prompts_per_step: 4
  samples_per_prompt: 4
  max_new_tokens: 32
staleness:
  max_staleness: 2
  pull_every: 2
transport:
  type: inproc
  keep_versions: 3
verifier:
  judge:
    type: math
    rel_tol: 0.001
"""


def _write(tmp_path: Path, text: str | bytes, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_a_valid_config_loads_with_plugin_sections(tmp_path: Path) -> None:
    config = load_run_config(_write(tmp_path, VALID))
    assert config.run.seed == 3
    assert config.rollout.samples_per_prompt == 4
    assert (config.transport.type, config.transport.keep_versions) == ("inproc", 3)
    assert (config.verifier.judge.type, config.verifier.judge.rel_tol) == ("math", 0.001)
    assert config.launcher is None


def test_defaults_fill_every_section() -> None:
    config = validate_run_config({})
    assert config.transport.type == "inproc"
    assert config.model.preset == "tiny"
    assert config.verifier is None


def test_the_data_section_is_optional_and_fills_defaults(tmp_path: Path) -> None:
    assert validate_run_config({}).data is None
    text = (
        "data:\n  train:\n    - path: data/gsm8k.parquet\n      prompt_template: 'Q: {question}'\n"
        "      answer_field: answer\n  eval:\n    path: held-out.jsonl\n"
        "    prompt_template: '{prompt}'\n    problem_field: problem\n    limit: 50\n"
    )
    data = load_run_config(_write(tmp_path, text)).data
    (train,) = data.train
    assert (train.dataset_name, train.format, train.weight, train.limit) == (
        "gsm8k",
        "auto",
        1,
        None,
    )
    assert (data.eval.dataset_name, data.eval.limit, data.shuffle) == ("held-out", 50, True)


def test_wandb_logging_is_off_unless_the_metrics_section_asks(tmp_path: Path) -> None:
    assert validate_run_config({}).metrics.wandb is None
    text = "metrics:\n  wandb: {project: rlax-runs, mode: offline, tags: [gsm8k]}\n"
    wandb = load_run_config(_write(tmp_path, text)).metrics.wandb
    assert (wandb.project, wandb.mode, wandb.tags) == ("rlax-runs", "offline", ["gsm8k"])
    assert (wandb.entity, wandb.name, wandb.group) == (None, None, None)


def test_check_prints_the_chosen_plugins(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tokenizer = Path(__file__).resolve().parents[3] / "examples" / "quickstart" / "tokenizer"
    path = _write(tmp_path, VALID + f"model:\n  preset: tiny\n  tokenizer: {tokenizer}\n")
    assert main(["config", "check", str(path)]) == 0
    assert (
        "valid run config (transport=inproc, judge=math, environment=single_turn)"
        in capsys.readouterr().out
    )


BAD_CONFIGS = {
    "syntax error": (
        "run:\n  name: [unclosed\n",
        ["YAML syntax error", "flow sequence, which began on line 2"],
    ),
    "tab indentation": ("run:\n\tname: x\n", ["YAML syntax error", "never tabs"]),
    "empty file": ("", ["is empty", "run:"]),
    "only comments": ("# nothing here\n\n", ["is empty"]),
    "top level is a list": ("- run\n- model\n", ["top level is a list", "mapping"]),
    "top level is a scalar": ("hello\n", ["top level is a str"]),
    "several documents": ("run: {}\n---\nrun: {}\n", ["several YAML documents"]),
    "duplicate key": (
        "rollout:\n  max_new_tokens: 8\n  max_new_tokens: 9\n",
        ["duplicate key 'max_new_tokens'", "first written on line 2"],
    ),
    "unknown top-level key": (
        "rolout:\n  prompts_per_step: 2\n",
        [":1: rolout: unknown key 'rolout'", "did you mean 'rollout'", "allowed here:"],
    ),
    "unknown nested key": (
        "rollout:\n  batch_size: 32\n",
        [":2: rollout.batch_size: unknown key", "prompts_per_step", "samples_per_prompt"],
    ),
    "wrong type": (
        "rollout:\n  max_new_tokens: lots\n",
        [":2: rollout.max_new_tokens:", "valid integer", "got 'lots'"],
    ),
    "fractional count": (
        "rollout:\n  prompts_per_step: 2.5\n",
        ["rollout.prompts_per_step", "got 2.5"],
    ),
    "out of range": (
        "rollout:\n  samples_per_prompt: 0\n",
        ["rollout.samples_per_prompt", "greater than or equal to 1", "got 0"],
    ),
    "bad enum value": (
        "algorithm:\n  advantage: ppo\n",
        ["algorithm.advantage", "'grpo'", "got 'ppo'"],
    ),
    "unknown plugin type": (
        "transport:\n  type: natz\n",
        [
            ":2: transport.type: type 'natz' is not an installed transport",
            "installed: 'grpc', 'inproc', 'nats'",
        ],
    ),
    "missing plugin type": (
        "transport:\n  keep_versions: 2\n",
        [
            "transport: needs a 'type' key saying which transport to use: "
            "one of 'grpc', 'inproc', 'nats'"
        ],
    ),
    "unknown plugin field": (
        "transport:\n  type: inproc\n  url: nats://x\n",
        [":3: transport.url: unknown key 'url'", "keep_versions"],
    ),
    "bad plugin field value": (
        "verifier:\n  judge:\n    type: math\n    rel_tol: -1\n",
        [":4: verifier.judge.rel_tol", "got -1"],
    ),
    "missing required field": ("verifier: {}\n", ["verifier.judge: required, but missing"]),
    "contradictory staleness": (
        "staleness:\n  max_staleness: 0\n  pull_every: 3\n",
        ["staleness: pull_every (3) exceeds max_staleness + 1 (1)"],
    ),
    "contradictory warmup": (
        "trainer:\n  total_steps: 10\n  warmup_steps: 10\n",
        ["warmup_steps (10) must be less than total_steps (10)"],
    ),
    "contradictory group size": (
        "rollout:\n  samples_per_prompt: 1\nalgorithm:\n  advantage: grpo\n",
        ["(top level): algorithm.advantage 'grpo'", "samples_per_prompt is 1"],
    ),
    "contradictory model source": (
        "model:\n  preset: tiny\n  path: /ckpt\n",
        ["model.preset ('tiny') and model.path ('/ckpt') are both set"],
    ),
    "section is a scalar": ("rollout: 8\n", ["rollout:", "got 8"]),
    "unknown model preset": (
        "model:\n  preset: qwen9_1t\n",
        [":2: model.preset: unknown preset 'qwen9_1t'", "qwen2_5_0_5b"],
    ),
    "bad run name": ("run:\n  name: 'my run!'\n", ["run.name", "pattern"]),
    "null for a number": ("rollout:\n  top_p: null\n", ["rollout.top_p", "got None"]),
    "no training datasets": (
        "data:\n  train: []\n",
        [":2: data.train: List should have at least 1 item", "Training datasets"],
    ),
    "dataset without answer or problem": (
        "data:\n  train:\n    - path: a.jsonl\n      prompt_template: '{q}'\n",
        [":3: data.train.0: give exactly one of answer_field", "neither is set"],
    ),
    "dataset with answer and problem": (
        "data:\n  eval:\n    path: a.jsonl\n    prompt_template: '{q}'\n"
        "    answer_field: a\n    problem_field: p\n  train: []\n",
        ["data.eval: give exactly one of answer_field", "both are set"],
    ),
    "zero dataset weight": (
        "data:\n  train:\n    - path: a.jsonl\n      prompt_template: '{q}'\n"
        "      answer_field: a\n      weight: 0\n",
        [":6: data.train.0.weight: Input should be greater than 0", "got 0", "Relative share"],
    ),
    "unbalanced template brace": (
        "data:\n  train:\n    - path: a.jsonl\n      prompt_template: 'Q: {q'\n"
        "      answer_field: a\n",
        [":4: data.train.0.prompt_template: is not a valid str.format template", "{{ and }}"],
    ),
    "positional template field": (
        "data:\n  train:\n    - path: a.jsonl\n      prompt_template: 'Q: {}'\n"
        "      answer_field: a\n",
        [":4: data.train.0.prompt_template: uses a positional field {}"],
    ),
    "unknown dataset key": (
        "data:\n  train:\n    - path: a.jsonl\n      template: '{q}'\n",
        [":4: data.train.0.template: unknown key", "did you mean 'prompt_template'"],
    ),
    "wandb without a project": (
        "metrics:\n  wandb: {mode: offline}\n",
        ["metrics.wandb.project: required, but missing"],
    ),
    "bad wandb mode": (
        "metrics:\n  wandb:\n    project: p\n    mode: cloud\n",
        [":4: metrics.wandb.mode", "'online'", "got 'cloud'"],
    ),
    "clashing dataset names": (
        "data:\n  train:\n    - {path: a/x.jsonl, prompt_template: '{q}', answer_field: a}\n"
        "    - {path: b/x.parquet, prompt_template: '{q}', answer_field: a}\n",
        ["data.train[0] and data.train[1] are both named 'x'", "set a different name"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_is_one_clear_message(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text, expected = BAD_CONFIGS[case]
    path = _write(tmp_path, text)
    assert main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}")
    assert "Traceback" not in err
    for fragment in expected:
        assert fragment in err, f"{fragment!r} not in:\n{err}"


def test_binary_garbage_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _write(tmp_path, bytes(range(256)) * 4)
    assert main(["config", "check", str(path)]) == 2
    assert "binary data" in capsys.readouterr().err


def test_non_utf8_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _write(tmp_path, "run:\n  name: caf\xe9\n".encode("latin-1"))
    assert main(["config", "check", str(path)]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err


def test_missing_file_and_directory_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["config", "check", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["config", "check", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_every_problem_is_reported_in_line_order(tmp_path: Path) -> None:
    path = _write(tmp_path, "rollout:\n  top_k: -1\n  samples_per_prompt: 0\nfoo: 1\n")
    with pytest.raises(ConfigError) as raised:
        load_run_config(path)
    lines = str(raised.value).splitlines()
    assert "(3 problems)" in lines[0]
    assert [line.split(": ")[1] for line in lines[1:]] == [
        "rollout.top_k",
        "rollout.samples_per_prompt",
        "foo",
    ]


def test_the_cli_prints_no_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path, "rollout:\n  max_new_tokens: lots\n")
    result = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "config", "check", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 2, result.stderr  # headline + one problem
    assert "Traceback" not in result.stderr
