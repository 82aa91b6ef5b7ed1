"""The ``rlax`` command: plugins, config schema, subcommands, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlax_core.cli.main import main


def test_plugins_lists_each_registration(capsys: pytest.CaptureFixture) -> None:
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    rows = {(p["kind"], p["name"]): p for p in listing["plugins"]}
    assert rows[("transport", "inproc")]["package"] == "rlax-core"
    assert rows[("judge", "math")]["package"] == "rlax-verifiers"
    assert all(p["version"] == "0.1.0" for p in listing["plugins"])


def test_plugins_prints_a_table(capsys: pytest.CaptureFixture) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    for fragment in ("kind", "transport", "inproc", "rlax-core", "judge", "math", "rlax-verifiers"):
        assert fragment in out


def test_config_schema_covers_plugin_configs(capsys: pytest.CaptureFixture) -> None:
    assert main(["config", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "RunConfig"
    assert schema["additionalProperties"] is False
    defs = schema["$defs"]
    assert "InProcTransportConfig" in defs and "MathJudgeConfig" in defs
    assert defs["InProcTransportConfig"]["properties"]["type"]["const"] == "inproc"
    assert schema["properties"]["transport"]["x-rlax-plugin-kind"] == "transport"

    def undocumented(node: dict, path: str) -> list[str]:
        missing = []
        for name, prop in node.get("properties", {}).items():
            if "description" not in prop:
                missing.append(f"{path}.{name}")
        return missing

    missing = undocumented(schema, "RunConfig")
    for name, definition in defs.items():
        missing += undocumented(definition, name)
    assert missing == [], f"fields without a description: {missing}"


def test_every_command_is_built() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "--help"], capture_output=True, text=True
    )
    for command in ("train", "eval", "status", "verify", "launch", "plugins", "config", "bench",
                    "serve", "plot"):  # fmt: skip
        assert command in result.stdout


def test_train_refuses_a_bad_config_before_starting(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  prompts_per_step: 0\n")
    assert main(["train", str(bad), "--run-dir", str(tmp_path / "run")]) == 2
    assert "rollout.prompts_per_step" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing started


def test_set_overrides_the_run_config(tmp_path, capsys) -> None:
    config = "examples/quickstart.yaml"
    assert main(["config", "check", config, "--set", "rollout.prompts_per_step=0"]) == 2
    assert "rollout.prompts_per_step" in capsys.readouterr().err
    assert main(["config", "check", config, "--set", "trainer.learning_rate=2e-5"]) == 0
    assert main(["config", "check", config, "--set", "eval.ks=[1, 8"]) == 2
    assert "--set 'eval.ks=[1, 8': the value is not YAML" in capsys.readouterr().err
    run_dir = tmp_path / "run"
    args = ["train", config, "--run-dir", str(run_dir), "--set", "trainer.total_steps=0"]
    assert main(args) == 2  # train validates the config with its overrides
    assert "trainer.total_steps: Input should be greater than or equal to 1" in (
        capsys.readouterr().err
    )
    assert not run_dir.exists()


def test_a_launch_with_overrides_hands_its_processes_a_file_holding_them(tmp_path) -> None:
    from pathlib import Path

    from rlax_core.config import load_run_config
    from rlax_core.config.overrides import write_overridden

    source = tmp_path / "run.yaml"  # its relative paths: quickstart/...
    source.write_text(Path("examples/quickstart.yaml").read_text())
    (tmp_path / "quickstart").symlink_to(Path("examples/quickstart").resolve())
    written = write_overridden(source, {"trainer": {"learning_rate": 2e-5}})
    assert written.parent == source.parent and written.name.startswith(".run.set-")
    config = load_run_config(written)
    assert config.trainer.learning_rate == 2e-5
    assert config.model.overrides == load_run_config(source).model.overrides
    assert main(["config", "check", str(written)]) == 0


def test_usage_errors_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "frobnicate"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr


def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "--version"], capture_output=True, text=True
    )
    assert result.stdout.strip() == "rlax 0.1.0"


def test_launch_without_a_launcher_section_points_to_rlax_train(
    capsys: pytest.CaptureFixture,
) -> None:
    assert main(["launch", "examples/quickstart.yaml", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "examples/quickstart.yaml has no launcher section" in err
    assert "use `rlax train examples/quickstart.yaml`" in err


def test_rendered_artifacts_print_as_yaml_or_as_a_shell_script(tmp_path) -> None:
    from rlax_core.cli.launch_cmd import format_artifacts
    from rlax_core.contracts import RenderedArtifact

    manifests = [
        RenderedArtifact(kind="manifest", name="ConfigMap/a", content="kind: ConfigMap\n"),
        RenderedArtifact(kind="manifest", name="JobSet/a", content="kind: JobSet\n"),
    ]
    assert format_artifacts(manifests) == "---\nkind: ConfigMap\n---\nkind: JobSet\n"
    script = tmp_path / "dir with space" / "start.sh"
    shell = format_artifacts(
        [
            RenderedArtifact(kind="script", name=str(script), content="echo 'hi' $HOME\n"),
            RenderedArtifact(kind="command", name="cat", content=f"cat '{script}'"),
        ]
    )
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True)
    assert result.stdout == "echo 'hi' $HOME\n"  # written verbatim, then the command ran


def test_a_closed_pipe_ends_a_command_quietly() -> None:
    # `rlax config schema | head -1`: the reader leaves after one line, long before the
    # schema (tens of kilobytes, past the pipe's buffer) is written.
    writer = subprocess.Popen(
        [sys.executable, "-m", "rlax_core.cli", "config", "schema"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert writer.stdout is not None and writer.stderr is not None
    assert writer.stdout.readline().strip() == b"{"
    writer.stdout.close()
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=120) == 141  # as SIGPIPE ends a C program
    assert err == ""  # no traceback, no "Exception ignored"


def test_a_plugin_whose_hook_raises_is_named_with_how_to_skip_it(tmp_path) -> None:
    # A real entry point: a distribution's metadata on the path, as pip would install it.
    (tmp_path / "raising_plugin.py").write_text(
        "from rlax_core.hookspecs import hookimpl\n\n\n"
        "@hookimpl\ndef register_judges(register):\n    raise RuntimeError('boom')\n"
    )
    dist_info = tmp_path / "rlax_raising-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlax-raising\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[rlax]\nraising = raising_plugin\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("RLAX_LOAD_PLUGINS", None)
    rlax = [sys.executable, "-m", "rlax_core.cli"]
    result = subprocess.run([*rlax, "config", "schema"], env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stdout == ""
    err = result.stderr
    assert "the rlax plugin 'raising' of package rlax-raising" in err
    assert "entry point 'raising = raising_plugin'" in err
    assert "register_judges raised RuntimeError: boom (at raising_plugin.py:6)" in err
    skip = err.split("run without it: ")[1].split()[0]
    assert skip.startswith("RLAX_LOAD_PLUGINS=") and "rlax-verifiers" in skip
    assert "rlax-raising" not in skip
    env["RLAX_LOAD_PLUGINS"] = skip.split("=", 1)[1]  # what the message says works
    result = subprocess.run([*rlax, "plugins", "--json"], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "rlax-raising" not in result.stdout


def test_train_says_what_it_starts_in_words() -> None:
    from argparse import Namespace

    from rlax_core.cli.train_cmd import _starting
    from rlax_core.config import load_run_config
    from rlax_core.config.overrides import parse_overrides

    def starting(role: str = "all", *sets: str, **args: object) -> str:
        config = load_run_config("examples/quickstart.yaml", overrides=parse_overrides(sets))
        given = {"worker_id": "w0", "verifier_id": "v0", "num_processes": None, **args}
        return _starting(Namespace(role=role, **given), config)

    assert starting() == "the embedded run: the trainer, 1 worker (judging its own rollouts)"
    staged = ("rollout.workers=2", "verifier.placement=stage", "verifier.workers=3")
    assert starting("all", *staged) == "the embedded run: the trainer, 2 workers, 3 verifiers"
    assert starting("worker") == "worker w0"
    assert starting("trainer", num_processes=2, process_id=1) == "the trainer (process 1 of 2)"
