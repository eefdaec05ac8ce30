"""The command line's persistent compilation cache: a program is compiled once per machine.

On a CPU most of a short run is compilation, not sampling: a run of adaptive SMC on the 32-d
brownian_motion target (one population of 4,096 particles) spends about 1.4 s on its ~540
gradient evaluations, and 33 s in all, of which 20 s go to compiling the initial distribution's
fits and 8 s to compiling the SMC loop. JAX can keep compiled programs on disk
(`jax_compilation_cache_dir`); a later run that builds the same program (the same target, sizes
and settings, whatever the seed: a fitted start's arrays are the programs' arguments,
`targets.Target.constants`) loads it instead. The second such run took 25 s, its SMC 2.7 s
instead of 9.7 s, and gave the same record to the last digit (XLA's compilation is deterministic).
The default policy's run on that target (seed 1: a start, two pilots, a final run) took 61.5 s
with an empty cache and 36.7 s with a full one; what is left is tracing the programs and sampling.

`enable` turns it on for the command line (`cli.app`) in
`$MCD_CACHE_DIR`, else `$XDG_CACHE_HOME/mcd-cli/jax`, else `~/.cache/mcd-cli/jax`;
`MCD_CACHE_DIR=off` turns it off. A cache already configured for JAX (`JAX_COMPILATION_CACHE_DIR`,
or `jax.config`) is left as it is, and so are the cache's other JAX settings given in the
environment (e.g. `JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`). Every program is kept, however
quickly it compiled (`MIN_COMPILE_SECONDS` 0): a run compiles dozens of small eager operations
(0.02-0.09 s each to compile, about 0.015 s to load), and keeping them too took a warm run of the
PyMC normal model with unknown variance from 11.6 s to 9.8 s and gmm8's from 9.0 s to 8.6 s (until
session 46 only programs that compiled in 0.1 s or more were kept). JAX keeps the folder under
`MAX_BYTES` by removing the least recently used programs. A folder that cannot be created leaves
the run uncached.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

MIN_COMPILE_SECONDS = 0.0
MAX_BYTES = 2 << 30
OFF = frozenset({"off", "none", "0", "false", "no"})


def cache_dir(environ: Mapping[str, str] = os.environ) -> Optional[Path]:
    """Where the cache lives, from the environment (None: off).

    Example:
        >>> str(cache_dir({"MCD_CACHE_DIR": "/scratch/c"})), cache_dir({"MCD_CACHE_DIR": "off"})
        ('/scratch/c', None)
        >>> str(cache_dir({"XDG_CACHE_HOME": "/x", "HOME": "/h"}))
        '/x/mcd-cli/jax'
    """
    chosen = environ.get("MCD_CACHE_DIR")
    if chosen is not None:
        return None if chosen.strip().lower() in OFF or not chosen.strip() else Path(chosen).expanduser()
    base = environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            home = environ.get("HOME") or str(Path.home())
        except (RuntimeError, KeyError):  # no home directory (some batch systems): no cache
            return None
        base = str(Path(home) / ".cache")
    return Path(base) / "mcd-cli" / "jax"


def enable(environ: Mapping[str, str] = os.environ) -> Optional[Path]:
    """Turns the persistent compilation cache on in this process (see the module docstring);
    returns its folder, or None when it is off or could not be created. Call it before the first
    compilation: JAX sets its cache up once per process."""
    import jax

    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    if environ.get("JAX_COMPILATION_CACHE_DIR") is not None:  # the user's own setting, even an empty one
        return None
    path = cache_dir(environ)
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(path, os.W_OK):
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    for name, value in (
        ("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS),
        ("jax_persistent_cache_min_entry_size_bytes", 0),
        ("jax_compilation_cache_max_size", MAX_BYTES),
    ):
        if environ.get(name.upper()) is None:  # the user's own JAX setting wins
            jax.config.update(name, value)
    return path
