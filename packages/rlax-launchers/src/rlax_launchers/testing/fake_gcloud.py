"""A ``gcloud`` stand-in: a real executable that records its argv and answers from files.

:func:`install_fake_gcloud` writes ``DIR/gcloud`` (a script that runs this module with
the current interpreter). Each run appends its argv as one JSON line to ``$FAKE_GCLOUD_LOG``;
prints ``$FAKE_GCLOUD_DIR/<command words>.json`` (the two words after ``compute tpus``, or
after ``compute``: ``tpu-vm-list.json``, ``instances-list.json``) when it exists, or for
the Nth run of those words ``<command words>.N.json`` where that exists (``tpu-vm-list.1.json``
answers the first listing, so a test scripts what each round of ``--watch`` sees); and
fails with exit status 1 when its argv contains ``$FAKE_GCLOUD_FAIL_ON``, printing
``$FAKE_GCLOUD_FAIL_MESSAGE`` to standard error.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path


def install_fake_gcloud(bin_dir: Path) -> Path:
    """Writes the ``gcloud`` executable into ``bin_dir`` and returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "gcloud"
    path.write_text(
        f"#!{sys.executable}\nimport sys\nfrom rlax_launchers.testing.fake_gcloud import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def recorded_commands(log: Path) -> list[list[str]]:
    """The argv of every recorded run, ``gcloud`` first."""
    if not log.exists():
        return []
    return [["gcloud", *json.loads(line)] for line in log.read_text().splitlines()]


def main(argv: list[str]) -> int:
    """Records ``argv``; answers or fails as the environment says."""
    log = os.environ.get("FAKE_GCLOUD_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps(argv) + "\n")
    fail_on = os.environ.get("FAKE_GCLOUD_FAIL_ON")
    if fail_on and any(fail_on in arg for arg in argv):
        print(os.environ.get("FAKE_GCLOUD_FAIL_MESSAGE", "ERROR: (gcloud) failed"), file=sys.stderr)
        return 1
    words = [a for a in argv[1:] if not a.startswith("-")]  # after "compute"
    words = words[1:3] if words[:1] == ["tpus"] else words[:2]
    answers = os.environ.get("FAKE_GCLOUD_DIR")
    if answers:
        name = "-".join(words)
        counter = Path(answers) / f".{name}.calls"
        calls = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(calls))
        for answer in (Path(answers) / f"{name}.{calls}.json", Path(answers) / f"{name}.json"):
            if answer.exists():
                sys.stdout.write(answer.read_text())
                break
    print(f"fake gcloud: {' '.join(argv[:4])} done", file=sys.stderr)
    return 0
