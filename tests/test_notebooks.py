"""The notebooks run, end to end, in their reduced-size mode (SCICHAINS_QUICK=1), teach the
public API (no ``examples/`` imports, no ``sys.path`` edits), run from any working directory,
and are stored with their outputs (figures) so that they read without running."""

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = {
    "blog_benchmarks",
    "ensembles",
    "events_and_inputs",
    "hybrid_pkpd",
    "lotka_volterra_discovery",
    "lynx_hare_discovery",
    "multi_trajectory",
    "population_pk_study",
    "neural_ode_spiral",
    "sir_discovery",
    "stiff_models",
    "theophylline_population",
}


def _execute(nb, cwd, monkeypatch):
    monkeypatch.setenv("SCICHAINS_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")
    NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()
    return [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]


def test_the_notebooks_are_the_expected_ones():
    assert {p.stem for p in NOTEBOOKS} == EXPECTED


# the stiff-models notebook compiles every stiff family's adjoint in its own process (~90 s of a
# cold CI run); what it shows is tested in tests/models/test_stiff_neural_ode.py and
# tests/adjoint/test_stiff_gradient.py, so it runs with the slow tests. The theophylline
# notebook runs in full in the default suite anyway, from another directory
# (test_a_notebook_runs_from_another_directory, below): its run here is a second one (~12 s).
# The ensembles notebook starts a Dask cluster of worker processes in its kernel (~26 s);
# what it shows is tested in tests/ode/test_ensemble.py, tests/parallel/test_parallel.py and
# tests/adjoint/test_ensemble_objective.py. The blog benchmarks notebook times the matrix
# exponential and LeNet-5 training (~12 s), tested in tests/nn.
# The population PK study fits a dozen models (a covariate search, a profile, a bootstrap:
# ~3 min at full size), each tested in tests/pk.
SLOW_NOTEBOOKS = {
    "stiff_models",
    "theophylline_population",
    "ensembles",
    "blog_benchmarks",
    "population_pk_study",
}


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW_NOTEBOOKS else p for p in NOTEBOOKS],
    ids=lambda p: p.stem,
)
def test_notebook_runs(path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    assert not _execute(nb, path.parent, monkeypatch)


def _sources(path):
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_uses_the_public_api_only(path):
    # the notebooks once did sys.path.insert(0, "../examples") and called example scripts
    for source in _sources(path):
        assert "sys.path" not in source
        assert "examples" not in source
        assert "_build" not in source
        # no private modules of the package
        assert "scichains._" not in source and "._" not in source.replace("self._", "")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_its_figures(path):
    # executed at full size by `python notebooks/_build.py --execute` (not in the test suite)
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "a code cell was never executed"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no figure stored"


def test_the_stored_notebooks_match_the_build_script():
    """The cells in the .ipynb files are those of notebooks/_build.py (edit the script, then
    `python notebooks/_build.py --execute`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_nb_build", NOTEBOOK_DIR / "_build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert set(build.NOTEBOOKS) == {p.name for p in NOTEBOOKS}
    for name, cells in build.NOTEBOOKS.items():
        stored = nbformat.read(NOTEBOOK_DIR / name, as_version=4).cells
        assert [c.source for c in stored] == [str(c) for c in cells], name
        kinds = ["markdown" if isinstance(c, build.Md) else "code" for c in cells]
        assert [c.cell_type for c in stored] == kinds, name


def test_a_notebook_runs_from_another_directory(tmp_path, monkeypatch):
    # a copy of the notebook alone, in an unrelated directory that is also the kernel's
    # working directory: nothing may be found relative to the repository (the data come from
    # scichains.datasets, the model and the fit are in the notebook's cells)
    path = NOTEBOOK_DIR / "theophylline_population.ipynb"
    copy = tmp_path / "elsewhere" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    nb = nbformat.read(copy, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("import os\nprint(os.getcwd())"))
    assert not _execute(nb, copy.parent, monkeypatch)
    printed = [
        "".join(o.get("text", "") for o in c.get("outputs", []))
        for c in nb.cells
        if c.cell_type == "code"
    ]
    assert Path(printed[0].strip()).resolve() == copy.parent.resolve()
    assert "12 subjects" in "".join(printed)
