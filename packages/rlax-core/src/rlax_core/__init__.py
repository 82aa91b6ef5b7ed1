"""RLAX core: contracts, plugin system, run config and the embedded defaults."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rlax-core")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
