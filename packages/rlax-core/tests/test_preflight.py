"""`rlax config check` and `rlax train` check what a run will touch, all problems at once.

Each kind of bad input a valid-looking config can hide is refused with exit 2 and a
message naming the file or field, before anything starts; never a traceback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.models import init_model, save_pretrained
from rlax_core.models.qwen import QwenConfig

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart"


def _config(tmp_path: Path, **sections: dict) -> Path:
    dataset = {"prompt_template": "{question}", "answer_field": "answer"}
    config = {
        "run": {"name": "preflight"},
        "model": {"preset": "tiny", "tokenizer": str(QUICKSTART / "tokenizer")},
        "data": {
            "train": [{"path": str(QUICKSTART / "data" / "train.jsonl"), **dataset}],
            "eval": {"path": str(QUICKSTART / "data" / "eval.jsonl"), **dataset},
        },
    }
    for name, section in sections.items():
        config[name] = section
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _check(path: Path, capsys: pytest.CaptureFixture) -> str:
    assert main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_good_config_passes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["config", "check", str(_config(tmp_path))]) == 0
    assert "valid run config" in capsys.readouterr().out


def test_dataset_problems_are_all_reported(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "1+1", "answer": "2"}\n')
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "1+1", "answer": "2"}\n{"question": \n')
    dataset = {"prompt_template": "{question}", "answer_field": "answer"}
    data = {
        "train": [
            {"path": str(tmp_path / "missing.jsonl"), **dataset},
            {
                "path": str(rows),
                "prompt_template": "{question} {hint}",
                "answer_field": "answer",
                "name": "hinted",
            },
            {
                "path": str(rows),
                "prompt_template": "{question}",
                "answer_field": "solution",
                "name": "solved",
            },
        ],
        "eval": {"path": str(broken), **dataset},
    }
    err = _check(_config(tmp_path, data=data), capsys)
    assert "the run cannot start (4 problems); nothing was started" in err
    assert "missing.jsonl: no such file" in err
    assert "has no field 'hint', which prompt_template uses" in err
    assert "has no field 'solution' (answer_field)" in err
    assert "broken.jsonl: line 2: not valid JSON" in err


def test_tokenizer_problems(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    err = _check(_config(tmp_path, model={"preset": "tiny", "tokenizer": str(tmp_path)}), capsys)
    assert "tokenizer.json: cannot load" in err
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(QUICKSTART / "tokenizer" / "tokenizer.json", plain)
    config = json.loads((QUICKSTART / "tokenizer" / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    model = {"preset": "tiny", "tokenizer": str(plain)}
    err = _check(_config(tmp_path, model=model, rollout={"chat_template": True}), capsys)
    assert "rollout.chat_template is true, but the tokenizer has no chat template" in err
    model["overrides"] = {"vocab_size": 100}
    err = _check(_config(tmp_path, model=model), capsys)
    assert "the tokenizer has 259 token ids but the model embeds 100" in err


def test_checkpoint_problems(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = tmp_path / "model"
    save_pretrained(init_model(QwenConfig.tiny(num_layers=1)), checkpoint)
    assert main(["config", "check", str(_config(tmp_path, model={"path": str(checkpoint),
                 "tokenizer": str(QUICKSTART / "tokenizer")}))]) == 0  # fmt: skip
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    model = {"path": str(checkpoint), "tokenizer": str(QUICKSTART / "tokenizer")}
    assert "truncated" in _check(_config(tmp_path, model=model), capsys)
    save_pretrained(init_model(QwenConfig.tiny(num_layers=1)), checkpoint)
    hf = json.loads((checkpoint / "config.json").read_text())
    hf["num_hidden_layers"] = 2  # config.json no longer matches the weights
    (checkpoint / "config.json").write_text(json.dumps(hf))
    assert "missing tensor(s)" in _check(_config(tmp_path, model=model), capsys)
    model["path"] = str(tmp_path / "nowhere")
    assert "not a checkpoint directory" in _check(_config(tmp_path, model=model), capsys)


def test_sizes_and_numbers_a_run_cannot_use(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    err = _check(_config(tmp_path, trainer={"mesh": {"fsdp": 64}},
                         rollout={"max_new_tokens": 4096}), capsys)  # fmt: skip
    assert "mesh data=1 × fsdp=64 × tensor=1 needs 64 devices, but this machine has 8" in err
    assert "4096 tokens do not fit the model's context of 2048 positions" in err
    err = _check(_config(tmp_path, trainer={"learning_rate": float("inf")},
                         rollout={"max_new_tokens": 10**12}), capsys)  # fmt: skip
    assert "trainer.learning_rate: Input should be a finite number" in err
    assert "rollout.max_new_tokens: Input should be less than or equal to 1048576" in err


def test_train_runs_the_same_checks_first(tmp_path: Path) -> None:
    config = _config(tmp_path, rollout={"max_new_tokens": 4096})
    result = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "train", str(config), "--run-dir",
         str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2
    assert "4096 tokens do not fit" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()
