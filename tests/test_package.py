"""The package's top level: what ``import scichains`` loads and exposes."""

import subprocess
import sys

import pytest

LAZY = ("adjoint", "datasets", "discovery", "models", "ode", "parallel", "pk")

_CHECK = """
import sys
import scichains as sc
lazy = {lazy!r}
assert not [m for m in sys.modules if m.startswith(tuple("scichains." + n for n in lazy))], \\
    sorted(m for m in sys.modules if m.startswith("scichains."))
assert set(lazy) <= set(dir(sc)), dir(sc)
mod = getattr(sc, {name!r})
assert mod is sys.modules["scichains." + {name!r}]
assert getattr(sc, {name!r}) is mod
print("ok", mod.__name__)
"""


@pytest.mark.parametrize("name", LAZY)
def test_subpackages_load_on_first_access(name):
    # issue 11.6: `import scichains as sc; sc.ode` was a bare AttributeError
    r = subprocess.run(
        [sys.executable, "-c", _CHECK.format(lazy=LAZY, name=name)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"ok scichains.{name}" in r.stdout


def test_unknown_attribute_is_still_an_attribute_error():
    import scichains as sc

    with pytest.raises(AttributeError, match="has no attribute 'odee'"):
        sc.odee  # noqa: B018
    assert not hasattr(sc, "not_a_subpackage")


_NOTHING_COMPILED = """
from numba.core import event
compiled = []
class Listener(event.Listener):
    def on_start(self, ev):
        d = ev.data.get("dispatcher")
        compiled.append(getattr(getattr(d, "py_func", None), "__qualname__", str(d)))
    def on_end(self, ev):
        pass
event.register("numba:compile", Listener())
import scichains.adjoint, scichains.models
from scichains.adjoint import _forward
from scichains.models import _lockstep, _neural_ode
lazy = [_lockstep._lockstep_rhs, _lockstep._lockstep_vjp, _neural_ode._neural_rhs,
        _neural_ode._neural_vjp, _forward.augmented_rhs]
assert all(c._made is None for c in lazy), "a C-callable was compiled at import"
names = ("_rhs", "_vjp", "_rhs_status", "_vjp_status", "_augmented")
assert not [c for c in compiled if c in names], compiled
print("ok")
"""


def test_importing_models_compiles_no_model_callables():
    # numba.cfunc compiles when its module is imported: with a cold cache, importing
    # scichains.models compiled the lockstep and neural-ODE callables (~7 s) for every user,
    # and scichains.adjoint the forward-sensitivity right-hand side (~1 s)
    r = subprocess.run(
        [sys.executable, "-c", _NOTHING_COMPILED], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ok" in r.stdout
