"""TPU slice shapes: chips, hosts, topologies and the errors for shapes that cannot be."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rlax_core.cli.main import main
from rlax_launchers.tpu_slice import TpuSliceConfig


@pytest.mark.parametrize(
    ("accelerator_type", "chips", "hosts", "topology"),
    [
        ("v5p-8", 4, 1, "2x2x1"),
        ("v5p-16", 8, 2, "2x2x2"),
        ("v5p-32", 16, 4, "2x2x4"),
        ("v5p-128", 64, 16, "4x4x4"),
        ("v5p-2048", 1024, 256, "8x8x16"),
        ("v4-8", 4, 1, "2x2x1"),
    ],
)
def test_accelerator_types_give_chips_hosts_and_the_usual_shape(
    accelerator_type: str, chips: int, hosts: int, topology: str
) -> None:
    shape = TpuSliceConfig(accelerator_type=accelerator_type).shape()
    assert (shape.chips, shape.hosts, shape.topology) == (chips, hosts, topology)
    assert shape.chips_per_host == 4
    assert shape.gcloud_shape_flags() == [f"--accelerator-type={accelerator_type}"]


def test_an_explicit_topology_is_passed_as_type_and_topology() -> None:
    shape = TpuSliceConfig(accelerator_type="v5p-32", topology="4x2x2").shape()
    assert (shape.hosts, shape.topology) == (4, "4x2x2")
    assert shape.gcloud_shape_flags() == ["--type=v5p", "--topology=4x2x2"]
    assert shape.generation.gke_accelerator == "tpu-v5p-slice"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"accelerator_type": "v5p-16", "topology": "2x2x4"},
            "topology 2x2x4 has 16 chips but v5p-16 has 8; give a topology whose product is 8,"
            " e.g. 2x2x2",
        ),
        ({"accelerator_type": "v5p-12"}, "v5p-12 has 6 chips; RLAX places whole hosts of 4"),
        ({"accelerator_type": "v5p-7"}, "not a whole number of v5p chips"),
        ({"accelerator_type": "v6e-8"}, "TPU generation 'v6e' is not supported"),
        ({"accelerator_type": "tpu-v5p"}, "is not of the form v<generation>-<TensorCores>"),
        ({"accelerator_type": "v5p-16", "topology": "2x4"}, "is not of the form AxBxC"),
        ({"accelerator_type": "v5p-24"}, "has no usual shape; give topology"),
    ],
)
def test_impossible_slices_are_refused_with_the_reason(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        TpuSliceConfig(**fields)
    assert message in str(caught.value)


@pytest.mark.parametrize("launcher", ["gke", "tpu-vm"])
@pytest.mark.parametrize(
    ("mesh", "refused"),
    [({}, True), ({"fsdp": 8}, True), ({"fsdp": 32}, True), ({"data": 2, "fsdp": 8}, False)],
)
def test_a_trainer_mesh_must_cover_the_trainer_slice(
    launcher: str,
    mesh: dict,
    refused: bool,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    """A 1×1×1 mesh on a 16-chip trainer slice leaves 15 chips idle; one over more
    devices cannot be built once the slice is found: both are refused at the launch."""
    section = {"type": launcher, "trainer": {"accelerator_type": "v5p-32"},
               "workers": {"accelerator_type": "v5p-8"}}  # fmt: skip
    if launcher == "gke":
        section |= {"image": "registry.example/rlax:1", "run_dir": "gs://bucket/runs/demo"}
    else:
        section |= {"project": "rl-project", "zone": "us-east5-a"}
    path = write_run_config(section)
    config = yaml.safe_load(path.read_text())
    config["trainer"]["mesh"] = mesh
    path.write_text(yaml.safe_dump(config))
    code = main(["launch", str(path), "--dry-run", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert (code, "the trainer slice v5p-32 has 16 chips" in err) == (
        (2, True) if refused else (0, False)
    )
