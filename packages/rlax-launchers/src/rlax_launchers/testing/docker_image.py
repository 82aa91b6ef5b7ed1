"""The RLAX image of this checkout, for tests that run containers of it.

Built offline (:mod:`rlax_launchers.docker.image`) on first use, then found by its
content tag: tests get the image of the code they test, never a stale ``rlax:cpu``.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from rlax_launchers.docker.image import ensure_rlax_image, find_checkout


@functools.cache
def checkout_image() -> str:
    """The content tag of the image of the checkout this package was installed from."""
    import docker

    checkout = find_checkout(Path(__file__).resolve().parent)
    return ensure_rlax_image(
        docker.from_env(), checkout, log=lambda message: print(message, file=sys.stderr)
    )
