"""The installed mcd-cli version, on the ground floor: every module may import it."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mcd-cli")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"
