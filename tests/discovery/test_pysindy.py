"""PySINDy interop (optional dependency): its feature libraries as scichains libraries, its
optimizers on our regression problem; the default path does not import it."""

import subprocess
import sys

import numpy as np
import pytest
import sympy as sp

from scichains.discovery import (
    PolynomialLibrary,
    PySINDyLibrary,
    candidate_structures,
    sparse_regression,
    to_pysindy,
)

x, y = sp.symbols("x y")


def test_default_path_does_not_import_pysindy():
    code = (
        "import sys, numpy as np\n"
        "from scichains.discovery import PolynomialLibrary, sparse_regression\n"
        "X = np.random.default_rng(0).uniform(size=(20, 2))\n"
        "sparse_regression(X, X[:, :1] * X[:, 1:], PolynomialLibrary(2))\n"
        "assert 'pysindy' not in sys.modules and 'sklearn' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pysindy_library_matches_ours_and_becomes_sympy():
    ps = pytest.importorskip("pysindy")
    lib = PySINDyLibrary(ps.PolynomialLibrary(degree=2) + ps.FourierLibrary(n_frequencies=1))
    X = np.random.default_rng(0).uniform(0.1, 2.0, (30, 2))
    ours = PolynomialLibrary(2, sin=True)
    assert lib.names(["x", "y"])[:6] == ["1", "x", "y", "x^2", "x y", "y^2"]
    exprs = lib.expressions([x, y])
    assert exprs[:6] == ours.expressions([x, y])[:6]
    assert exprs[6:] == [sp.sin(x), sp.cos(x), sp.sin(y), sp.cos(y)]
    np.testing.assert_allclose(lib(X)[:, :6], ours(X)[:, :6])
    # a sparse regression on PySINDy's library, exported to SymPy
    Y = 1.5 * X[:, 0] * X[:, 1] - 0.3 * np.sin(X[:, 1])
    fit = sparse_regression(X, Y, lib, input_names=["x", "y"])
    (expr,) = fit.to_sympy()
    target = 1.5 * x * y - 0.3 * sp.sin(y)
    assert float(sp.Abs((expr - target).subs({x: 0.4, y: 1.3}))) < 1e-8


def test_pysindy_custom_library_needs_expressions():
    ps = pytest.importorskip("pysindy")
    custom = ps.CustomLibrary(library_functions=[lambda u: np.exp(-u)])
    with pytest.raises(ValueError, match="expressions="):
        PySINDyLibrary(custom).expressions([x, y])
    lib = PySINDyLibrary(custom, expressions=lambda s: [sp.exp(-v) for v in s])
    assert lib.expressions([x, y]) == [sp.exp(-x), sp.exp(-y)]
    # wrong expressions are accepted as given (the user's word) but a wrong parse is not:
    X = np.random.default_rng(1).uniform(size=(10, 2))
    np.testing.assert_allclose(lib(X), np.exp(-X))


def test_pysindy_optimizer_on_our_regression_problem():
    ps = pytest.importorskip("pysindy")
    rng = np.random.default_rng(2)
    X = rng.uniform(0.2, 3.0, (100, 2))
    lib = PolynomialLibrary(2)
    U = np.stack([-0.9 * X[:, 0] * X[:, 1], 0.8 * X[:, 0] * X[:, 1]], 1)
    Th = lib(X)
    cands = candidate_structures(Th, U)
    d = to_pysindy(Th, U, cands[-1].coefficients)
    opt = ps.STLSQ(threshold=0.1)
    opt.fit(d["x"], d["y"])
    names = lib.names(["x", "y"])
    expect = np.zeros((2, len(names)))
    expect[:, names.index("x*y")] = [-0.9, 0.8]
    np.testing.assert_allclose(opt.coef_, expect, atol=1e-10)
    assert d["coef"].shape == (2, len(names))
    with pytest.raises(ValueError, match="same rows"):
        to_pysindy(Th, U[:3])
