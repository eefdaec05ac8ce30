"""Where a run's time goes (`mcd_cli.runtime.compile_clock`): compile seconds as the union of JAX's
compilation spans inside a window, the import's seconds only for a command."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from mcd_cli.runtime import compile_clock


@pytest.fixture
def spans(monkeypatch):
    kept = compile_clock._spans.__class__(maxlen=compile_clock.MAX_SPANS)
    monkeypatch.setattr(compile_clock, "_spans", kept)
    return kept


def test_the_union_of_nested_and_separate_spans_clipped_to_the_window(spans):
    spans.extend([(10.0, 14.0), (11.0, 12.0), (13.0, 15.0), (20.0, 21.0), (30.0, 31.0)])
    assert compile_clock.compile_seconds(0.0, 100.0) == pytest.approx(7.0)  # [10, 15] ∪ [20, 21] ∪ [30, 31]
    assert compile_clock.compile_seconds(12.5, 20.5) == pytest.approx(3.0)  # [12.5, 15] ∪ [20, 20.5]
    assert compile_clock.compile_seconds(16.0, 19.0) == 0.0
    assert compile_clock.compile_seconds(31.0, 40.0) == 0.0


def test_a_new_program_counts_and_a_cached_call_does_not():
    assert compile_clock.install()
    f = jax.jit(lambda x: jnp.sin(x) * 3.0 + jnp.cumsum(x))
    began = compile_clock.now()
    f(jnp.arange(7.0)).block_until_ready()
    first = compile_clock.compile_seconds(began)
    assert 0.0 < first <= compile_clock.now() - began
    again = compile_clock.now()
    f(jnp.arange(7.0)).block_until_ready()
    assert compile_clock.compile_seconds(again) == 0.0


def test_the_import_is_the_first_commands_only(monkeypatch):
    monkeypatch.setattr(compile_clock, "_state", {"installed": True, "ready": None, "commands": 0})
    assert compile_clock.import_seconds() is None  # a library call
    compile_clock.mark_ready()
    assert compile_clock.import_seconds() > 0.0
    compile_clock.mark_ready()  # a second command in the same process imported nothing
    assert compile_clock.import_seconds() == 0.0
