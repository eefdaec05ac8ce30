"""Where a run's time goes: how much of it JAX spent tracing, lowering and compiling programs.

JAX reports the wall-clock span of each trace (`/jax/core/compile/jaxpr_trace_duration`), each
lowering to MLIR (`.../jaxpr_to_mlir_module_duration`) and each backend compilation or load from
the persistent cache (`.../backend_compile_duration`) to listeners of `jax.monitoring`. `install`
registers one listener per process that keeps those spans; `compile_seconds(since, until)` is the
length of their union inside a window of wall time (a trace nested in another's counts once), so
a stage's compile seconds are the union over its span and its run seconds the rest.

`import_seconds` is the time from this module's import, the first of `mcd_cli` (before JAX is
imported), to `mark_ready`, which the command line calls when a command starts: the import of the package, JAX
and the libraries it loads. A library call leaves it None.

Example:
    >>> _spans.clear(); _spans.extend([(1.0, 3.0), (2.0, 4.0), (6.0, 7.0)])
    >>> compile_seconds(0.0, 10.0), compile_seconds(2.5, 6.5)
    (4.0, 2.0)
    >>> _spans.clear()
"""

from __future__ import annotations

import collections
import time
from typing import Optional

IMPORT_STARTED = time.perf_counter()  # `mcd_cli/__init__.py` imports this module first

# The events whose spans are compilation (jax._src.dispatch); others (cache hits, ...) are counts.
EVENTS = frozenset({
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
})
# The spans kept: a long-lived process (a benchmark of hundreds of runs) forgets the oldest.
MAX_SPANS = 200_000

_spans: collections.deque = collections.deque(maxlen=MAX_SPANS)
_state = {"installed": False, "ready": None, "commands": 0}


def _listen(event: str, start: float, end: float, **_) -> None:
    if event in EVENTS:
        _spans.append((start, end))


def install() -> bool:
    """Starts keeping JAX's compilation spans in this process (once); False where this JAX has no
    time-span listeners (its compile seconds are then not measured)."""
    if not _state["installed"]:
        import jax.monitoring

        register = getattr(jax.monitoring, "register_event_time_span_listener", None)
        if register is None:
            return False
        register(_listen)
        _state["installed"] = True
    return True


def now() -> float:
    """The clock of the spans (`time.time`, as JAX's)."""
    return time.time()


def compile_seconds(since: float, until: Optional[float] = None) -> Optional[float]:
    """Seconds of compilation between `since` and `until` (default now): the length of the union of
    the spans clipped to the window; None when no listener is installed."""
    if not _state["installed"] and not _spans:
        return None
    until = now() if until is None else until
    total, reached = 0.0, since
    for start, end in sorted((max(s, since), min(e, until)) for s, e in _spans if e > since and s < until):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def mark_ready() -> None:
    """A command starts: what came before the first was importing (`import_seconds`)."""
    if _state["ready"] is None:
        _state["ready"] = time.perf_counter()
    _state["commands"] += 1


def import_seconds() -> Optional[float]:
    """Seconds from the import of `mcd_cli` to the first command's `mark_ready`; 0 for a later
    command in the same process (it imported nothing); None in a library call."""
    ready = _state["ready"]
    if ready is None:
        return None
    return ready - IMPORT_STARTED if _state["commands"] <= 1 else 0.0
