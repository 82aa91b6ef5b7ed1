"""Regenerates the Python code of rlax_transport.proto (run after editing the .proto).

    uv run python packages/rlax-transport-grpc/scripts/generate_proto.py

Needs grpcio-tools (in the workspace's dev group). A test fails when the committed
code differs from what this script writes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parents[1] / "src" / "rlax_transport_grpc" / "proto"
PROTO = "rlax_transport.proto"
GENERATED = ("rlax_transport_pb2.py", "rlax_transport_pb2.pyi", "rlax_transport_pb2_grpc.py")


def generate(out_dir: Path) -> dict[str, str]:
    """Runs protoc on the .proto into ``out_dir``; returns file name → text."""
    from grpc_tools import protoc

    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"--proto_path={PROTO_DIR}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(PROTO_DIR / PROTO),
        ]
    )
    if status != 0:
        raise SystemExit(f"protoc failed with status {status}")
    texts = {name: (out_dir / name).read_text() for name in GENERATED}
    # protoc writes a top-level import; the package needs a relative one.
    grpc_module = texts["rlax_transport_pb2_grpc.py"]
    texts["rlax_transport_pb2_grpc.py"] = grpc_module.replace(
        "import rlax_transport_pb2 as rlax__transport__pb2",
        "from rlax_transport_grpc.proto import rlax_transport_pb2 as rlax__transport__pb2",
    )
    return texts


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in generate(Path(tmp)).items():
            (PROTO_DIR / name).write_text(text)
            print(f"wrote {PROTO_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
