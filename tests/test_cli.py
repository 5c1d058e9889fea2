"""The command-line entry point lists and runs the examples and benchmarks."""

from scichains._cli import main, scripts


def test_list_and_unknown(capsys):
    found = scripts()
    assert {"lotka_volterra_ude", "pk_hybrid", "theophylline", "matexp"} <= set(found)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "lotka_volterra_ude" in out and "benchmarks:" in out
    assert main(["run", "no_such_script"]) == 2


def test_run_an_example(capsys):
    assert main(["run", "neural_ode_rk4"]) == 0
    assert capsys.readouterr().out.strip()
