"""The missing-physics pipeline end to end (slow: minutes with compilation)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))


@pytest.mark.slow
def test_recovers_the_interaction_terms():
    import lotka_volterra_ude as lv

    Xi, err = lv.main([])
    names = lv.FEATURES
    support = {(names[i], j) for i, j in zip(*np.nonzero(Xi))}
    assert support == {("x*y", 0), ("x*y", 1)}
    assert Xi[names.index("x*y"), 0] == pytest.approx(-0.9, rel=0.15)
    assert Xi[names.index("x*y"), 1] == pytest.approx(0.8, rel=0.15)
    assert np.isfinite(err)


def _structure(Xi_fit, lv):
    Xi = np.zeros((len(lv.FEATURES), 2))
    for j, terms in enumerate(Xi_fit):
        for name, c in terms.items():
            Xi[lv.FEATURES.index(name), j] = c
    return Xi


@pytest.mark.slow
def test_selection_does_not_hinge_on_which_candidates_the_network_gives():
    """On the default seed's data, y' = -1.8 y + c0 + c2 y^2 has a lower plain BIC than the true
    x y (it fits these noisy points better); a plain-BIC choice therefore returned x y or
    1, y^2 depending on whether the network (which moves with the CPU's last bits) proposed
    1, y^2. The score (BIC + MARGIN per term) must rank the true structure first, and the
    stepwise search must not leave it, whichever way the candidates came."""
    import lotka_volterra_ude as lv

    from scichains.discovery import bic

    data = lv.make_data()
    model, _ = lv.ude_model()
    search = lv.structure_search(model, data)
    m = data.size
    truth = _structure([{"x*y": -0.9}, {"x*y": 0.8}], lv)
    alt = _structure([{"x*y": -0.9}, {"1": 0.1, "y^2": 0.05}], lv)
    fit_t = search.refit(truth)
    fit_a = search.refit(alt)
    # the premise: the plain BIC prefers the alternative on these data
    assert bic(fit_a.sse, m, 3) < bic(fit_t.sse, m, 2)
    # the margin does not
    assert fit_t.score < fit_a.score - 0.5
    # refits of one structure from different starts agree far below the score differences
    fit_t2 = lv.structure_search(model, data).refit(truth * 1.2)
    assert abs(fit_t2.score - fit_t.score) < 1e-6
    states = fit_t.simulate(lv.TS)
    end = search.stepwise(fit_t, search.library_matrix(states))
    assert end.moves == []
    assert np.array_equal(end.support, truth != 0)


# CPU configurations for numba (code generation), NumPy (SIMD dispatch) and OpenBLAS (kernels):
# the host as it is, and an AVX2-only machine (Haswell) emulated. numba's on-disk cache keys
# its entries on the CPU name and features, so the two share the cache without mixing.
AVX2 = {
    "NUMBA_CPU_NAME": "haswell",
    "NUMBA_CPU_FEATURES": "",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "OPENBLAS_CORETYPE": "Haswell",
}

_RUN = """
import json, sys
import numpy as np
sys.path.insert(0, {examples!r})
import lotka_volterra_ude as lv
Xi, err = lv.main([])
print(json.dumps([[lv.FEATURES[i], int(j)] for i, j in zip(*np.nonzero(Xi))]))
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="the CPU emulation names x86-64 targets")
def test_same_structure_on_host_and_emulated_avx2():
    """The whole pipeline (training, candidates, selection) in two processes whose arithmetic
    differs in the last bits (the trained networks differ; measured: loss 0.0628 after 1102
    iterations on an AVX-512 host, 0.0606 after 1386 with AVX2 emulated): both must find
    exactly the x y terms. The two run side by side (one numba thread each)."""
    code = _RUN.format(examples=str(ROOT / "examples"))
    base = dict(os.environ, NUMBA_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", code],
            env={**base, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, extra in (("host", {}), ("avx2", AVX2))
    }
    found = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{name}: {err[-2000:]}"
        found[name] = {tuple(t) for t in json.loads(out.strip().splitlines()[-1])}
    assert found["host"] == {("x*y", 0), ("x*y", 1)}, found
    assert found["avx2"] == found["host"], found


@pytest.mark.slow
def test_ten_noise_seeds():
    """The floor of issue 12: exactly the x y terms for at least 9 of the noise seeds 0-9
    (training seed fixed); about 20-40 minutes."""
    import lotka_volterra_ude as lv

    assert lv.run_seeds(10) >= 9
