"""The package's structure: no import circle (deferred imports included), ``parallel`` below the
solvers, and no source file over the size the design guide allows."""

import ast
import pathlib

import scichains

SRC = pathlib.Path(scichains.__file__).parent


def _modules():
    mods = {}
    for f in SRC.rglob("*.py"):
        parts = ["scichains", *f.relative_to(SRC).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
            pkg = parts
        else:
            pkg = parts[:-1]
        mods[".".join(parts)] = (f, pkg)
    return mods


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, at module level or inside functions (an
    ``if TYPE_CHECKING:`` block is not an import); a module's own parent packages left out."""
    mods = _modules()
    graph = {}
    for name, (f, pkg) in mods.items():
        tree = ast.parse(f.read_text())
        typing_only = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                typing_only.update(id(n) for b in node.body for n in ast.walk(b))
        out = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                base = pkg[: len(pkg) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                cands = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                cands = [a.name for a in node.names]
            else:
                continue
            out.update(c for c in cands if c in mods and c != name)
        graph[name] = {t for t in out if not name.startswith(t + ".")}
    return graph


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_graph_sees_deferred_imports():
    # the check below can fail: a deferred import inside a function is an edge
    graph = import_graph()
    assert "scichains.ode" in graph["scichains._warm"]  # imported inside warm()
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    assert _cycles(import_graph()) == []


def test_parallel_imports_nothing_that_solves():
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("scichains.parallel"):
            bad = [t for t in targets if t.startswith(("scichains.ode", "scichains.adjoint"))]
            assert not bad, (name, bad)


# files over ~700 lines allowed: none (pk/_objective.py, 713 lines, was split in three: the
# population objective, one subject's inner problem, the outer gradient)
ALLOWED: set[str] = set()


def test_no_source_file_over_700_lines():
    long = {
        str(f.relative_to(SRC)): n
        for f in SRC.rglob("*.py")
        if (n := len(f.read_text().splitlines())) > 700
    }
    assert set(long) <= ALLOWED, long
