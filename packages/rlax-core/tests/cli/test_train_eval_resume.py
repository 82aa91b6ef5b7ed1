"""A short quickstart run through the front door: what `rlax train` prints, `rlax status`
on the finished run, `rlax eval` of what it left, and its saved config given back."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlax_core.cli.main import main
from rlax_core.run_dir.metrics import read_metrics

REPO = Path(__file__).resolve().parents[4]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
# The quickstart's warm start (pass@1 is well above 0 after it), two RL steps, eight
# held-out prompts with two samples each.
SMALL = [
    "trainer.total_steps=2", "trainer.warmup_steps=0", "rollout.prompts_per_step=4",
    "rollout.samples_per_prompt=4", "rollout.groups_per_batch=4", "eval.max_prompts=8",
    "eval.samples_per_prompt=2", "eval.ks=[1, 2]", "checkpoint.every_steps=1",
]  # fmt: skip

# One run for the module, on one test process (the last test trains it on).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("finished_quickstart_run")]


def _rlax(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlax_core.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def finished_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess]:
    """The run directory of a finished two-step quickstart run, and its `rlax train`."""
    where = tmp_path_factory.mktemp("run")
    sets = [arg for value in SMALL for arg in ("--set", value)]
    result = _rlax("train", str(QUICKSTART), "--run-dir", "run", *sets, cwd=where)
    assert result.returncode == 0, result.stderr[-4000:]
    return where / "run", result


def _last_eval(run_dir: Path) -> dict:
    return [row for row in read_metrics(run_dir) if "eval/pass@1" in row][-1]


def test_a_run_says_what_it_starts_and_what_it_came_to(finished_run) -> None:
    run_dir, result = finished_run
    err = result.stderr
    assert "rlax train: starting the embedded run: the trainer, 1 worker (judging its own " \
        "rollouts)" in err  # fmt: skip
    assert re.search(r"warm start 35/35  loss \d+\.\d{3}", err)  # the quickstart's 35 steps
    assert err.count("evaluating: 8 prompts × 2 samples") == 2  # at step 0 and the last
    last = _last_eval(run_dir)
    out = result.stdout.splitlines()
    assert out[0] == (
        f"finished: 2 steps trained; held-out pass@1 {last['eval/pass@1']:.3f}, "
        f"pass@2 {last['eval/pass@2']:.3f} at step 2"
    )
    assert "the trained policy: run/final (Hugging Face safetensors" in out[1]
    assert "plots: rlax plot run (into run/plots)" in out[2]


def test_status_says_the_run_finished(finished_run, capsys) -> None:
    run_dir, _ = finished_run
    assert main(["status", str(run_dir)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("finished: 2 steps trained; held-out pass@1 ")


def test_eval_reproduces_the_runs_last_evaluation(finished_run, tmp_path, capsys) -> None:
    run_dir, _ = finished_run
    last = _last_eval(run_dir)
    expected = f"pass@1 {last['eval/pass@1']:.3f}  pass@2 {last['eval/pass@2']:.3f}"
    assert last["eval/pass@1"] > 0  # the warm start taught the format: a real check
    # The exported policy, from another working directory, with the saved config as it is.
    result = _rlax("eval", str(run_dir / "config.yaml"), "--checkpoint", str(run_dir / "final"),
                   "--out", "per-prompt.jsonl", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(expected), result.stdout
    lines = [json.loads(line) for line in (tmp_path / "per-prompt.jsonl").read_text().splitlines()]
    assert len(lines) == 8
    for line in lines:
        assert set(line) == {"id", "prompt", "answer", "completions", "verdicts", "rewards",
                             "correct"}  # fmt: skip
        assert line["prompt"].endswith(">") and line["prompt"][:4][::-1] == line["answer"]
        assert len(line["completions"]) == len(line["verdicts"]) == len(line["rewards"]) == 2
        assert line["correct"] == line["verdicts"].count("AC")
    assert sum(line["correct"] for line in lines) / 16 == pytest.approx(last["eval/pass@1"])
    # The last Orbax checkpoint holds the same policy; the run directory names its final/.
    assert main(["eval", str(QUICKSTART), "--checkpoint", str(run_dir / "checkpoints" / "2"),
                 *[a for v in SMALL for a in ("--set", v)]]) == 0  # fmt: skip
    assert capsys.readouterr().out.startswith(expected)
    assert main(["eval", str(run_dir / "config.yaml"), "--checkpoint", str(run_dir)]) == 0
    assert capsys.readouterr().out.startswith(expected)


def test_eval_refuses_what_it_cannot_use(finished_run, tmp_path, capsys) -> None:
    run_dir, _ = finished_run
    config = str(run_dir / "config.yaml")
    cases = [
        (["--checkpoint", str(tmp_path / "nowhere")], "no such directory"),
        (["--checkpoint", str(tmp_path)], "holds no checkpoint; give a Hugging Face folder"),
        (["--checkpoint", str(run_dir / "config.yaml")], "a file; give the checkpoint's folder"),
        (["--checkpoint", str(run_dir), "--data", "no.jsonl"], "--data no.jsonl: no such file"),
        (["--checkpoint", str(run_dir), "--set", "data.eval=null"], "no held-out set (data.eval)"),
        (["--checkpoint", str(run_dir), "--out", str(tmp_path)], "is a directory; give a file"),
        (["--checkpoint", str(run_dir / "checkpoints" / "2"), "--set",
          "model.overrides.hidden_size=64"], "does not fit the model the config describes (its "
         "'model.embed_tokens.weight' is [512, 128], the config's model's [512, 64])"),
    ]  # fmt: skip
    for args, message in cases:
        assert main(["eval", config, *args]) == 2, args
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


def test_eval_reads_any_prompt_file_with_the_held_out_sets_fields(finished_run, tmp_path) -> None:
    run_dir, _ = finished_run
    rows = [{"id": "a", "question": "1234>", "answer": "4321"}, {"id": "b", "question": "5678>",
            "answer": "8765"}]  # fmt: skip
    (tmp_path / "two.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = _rlax("eval", str(run_dir / "config.yaml"), "--checkpoint", str(run_dir / "final"),
                   "--data", "two.jsonl", "--out", "out.jsonl", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on 2 prompts × 2 samples of" in result.stderr
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(line["id"], line["answer"]) for line in lines] == [
        ("two/a", "4321"),
        ("two/b", "8765"),
    ]


def test_the_saved_config_resumes_the_run_from_anywhere(finished_run, tmp_path) -> None:
    """Last in the module: it trains the run on."""
    run_dir, _ = finished_run
    saved = run_dir / "config.yaml"
    before = saved.read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _rlax("train", str(saved), "--resume", "--no-progress", cwd=elsewhere)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"the run in {run_dir} finished at step 2; nothing to resume" in done.stderr
    more = _rlax("train", str(saved), "--resume", "--no-progress", "--set",
                 "trainer.total_steps=3", cwd=elsewhere)  # fmt: skip
    assert more.returncode == 0, more.stderr[-3000:]
    assert more.stdout.startswith("finished: 3 steps trained")
    assert [row["step"] for row in read_metrics(run_dir)] == [0, 1, 2, 3]
    assert not (elsewhere / "runs").exists()  # it went on in the run directory
    assert saved.read_text() == before.replace("total_steps: 2", "total_steps: 3")
