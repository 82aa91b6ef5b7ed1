"""The run directory's saved config: resolved, so that it can be given back as it is."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlax_core.config import load_run_config
from rlax_core.errors import ConfigError
from rlax_core.run_dir.layout import CONFIG_FILE, prepare

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def test_the_saved_config_holds_absolute_paths_and_its_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_run_config(EXAMPLES / "quickstart.yaml")  # paths: quickstart/…
    prepare(Path("runs/q"), config, resume=False, has_checkpoint=False, config_dir=EXAMPLES)
    saved = yaml.safe_load((tmp_path / "runs" / "q" / CONFIG_FILE).read_text())
    assert saved["run"]["run_dir"] == str(tmp_path / "runs" / "q")
    assert saved["model"]["tokenizer"] == str(EXAMPLES / "quickstart" / "tokenizer")
    assert saved["data"]["train"][0]["path"] == str(EXAMPLES / "quickstart/data/train.jsonl")
    assert saved["data"]["eval"]["path"] == str(EXAMPLES / "quickstart/data/eval.jsonl")
    again = load_run_config(tmp_path / "runs" / "q" / CONFIG_FILE)  # valid as it is
    # Both the saved config and the one the run started from resume it.
    for given, folder in ((again, tmp_path / "elsewhere"), (config, EXAMPLES)):
        prepare(Path("runs/q"), given, resume=True, has_checkpoint=True, config_dir=folder)


def test_a_run_directory_saved_with_relative_paths_still_resumes(tmp_path: Path) -> None:
    config = load_run_config(EXAMPLES / "quickstart.yaml")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(config.model_dump(mode="json")))
    prepare(run_dir, config, resume=True, has_checkpoint=True, config_dir=EXAMPLES)
    assert "/" + str(EXAMPLES).strip("/") in (run_dir / CONFIG_FILE).read_text()  # rewritten
    moved = tmp_path / "copy"  # the same relative paths from another folder: other files
    with pytest.raises(
        ConfigError, match=r"with in data\.eval\.path, data\.train, model\.tokenizer;"
    ):
        prepare(run_dir, config, resume=True, has_checkpoint=True, config_dir=moved)
