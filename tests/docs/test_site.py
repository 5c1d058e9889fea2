"""The documentation site builds without warnings, documents every public name, and reads in a
browser: headless Chromium loads the home page and a tutorial from a local server and finds
the title, a code block and (in the tutorial) a figure."""

from __future__ import annotations

import base64
import contextlib
import importlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    "scichains",
    "nn",
    "ode",
    "adjoint",
    "models",
    "discovery",
    "datasets",
    "pk",
    "parallel",
]
# names documented on their own pages rather than as members of the top-level page
ELSEWHERE = {"scichains": {"nn", "__version__"}}
TUTORIAL = "tutorials/neural_ode_spiral/"
INSTALL_CHROMIUM = "apt-get install -y chromium (Debian's package; .ci/run installs it)"


def _require_docs_tools():
    for mod in (
        "mkdocs",
        "material",
        "mkdocstrings",
        "mkdocstrings_handlers.python",
        "mkdocs_jupyter",
    ):
        pytest.importorskip(mod, reason="the docs extra is not installed: pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``mkdocs build --strict`` into a temporary folder (warnings, e.g. a broken link or
    reference, fail the build); the built site's folder."""
    _require_docs_tools()
    out = tmp_path_factory.mktemp("docs") / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stdout}\n{res.stderr}"
    return out


def test_the_build_is_strict_and_complete(site):
    assert (site / "index.html").is_file()
    assert (site / TUTORIAL / "index.html").is_file()
    for name in PACKAGES:
        assert (site / "api" / name / "index.html").is_file(), name


@pytest.mark.parametrize("name", PACKAGES)
def test_the_api_reference_lists_every_public_name(site, name):
    mod = "scichains" if name == "scichains" else f"scichains.{name}"
    exported = importlib.import_module(mod).__all__
    html = (site / "api" / name / "index.html").read_text(encoding="utf-8")
    documented = set(re.findall(r'id="' + re.escape(mod) + r'\.(\w+)"', html))
    missing = [n for n in exported if n not in documented and n not in ELSEWHERE.get(name, ())]
    assert not missing, f"{mod}: names in __all__ without an entry in the API reference: {missing}"


def _chromium() -> str | None:
    for exe in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(exe)
        if path:
            return path
    return None


@contextlib.contextmanager
def _serve(directory: Path):
    """``python -m http.server`` on a free port of 127.0.0.1, serving ``directory``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("python -m http.server exited") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _dom(browser: str, url: str, profile: Path) -> str:
    """The page's DOM after its scripts ran, as headless Chromium renders it."""
    res = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, f"chromium failed on {url}:\n{res.stderr[-2000:]}"
    return res.stdout


def _title(dom: str) -> str:
    m = re.search(r"<title>(.*?)</title>", dom, re.S)
    return m.group(1).strip() if m else ""


def _code_blocks(dom: str) -> list[str]:
    """The text of every ``<pre>`` element (highlighting markup removed)."""
    return [re.sub(r"<[^>]+>", "", b) for b in re.findall(r"<pre[^>]*>(.*?)</pre>", dom, re.S)]


def _png_shapes(dom: str) -> list[tuple[int, ...]]:
    """Shapes of the inline PNG figures (decoded: a figure that is not a PNG fails here)."""
    import matplotlib.image

    shapes = []
    for data in re.findall(r'<img[^>]*src="data:image/png;base64,([^"]+)"', dom):
        img = matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png")
        shapes.append(img.shape)
    return shapes


def test_the_site_reads_in_a_browser(site, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip(f"headless Chromium is not installed: {INSTALL_CHROMIUM}")
    with _serve(site) as url:
        home = _dom(browser, url, tmp_path / "profile")
        tutorial = _dom(browser, url + TUTORIAL, tmp_path / "profile")

    # the home page: its title, the first example as a highlighted code block, the navigation
    assert _title(home).startswith("scichains"), _title(home)
    assert re.search(r"<h1[^>]*>\s*scichains", home)
    assert any("sc.SimpleChain(" in c for c in _code_blocks(home)), "no code block"
    assert 'href="api/ode/"' in home  # the navigation reaches the API reference

    # the tutorial: its title, code cells with their source, figures that decode as images
    assert _title(tutorial).startswith("A neural ODE fitted to the spiral"), _title(tutorial)
    assert "jp-CodeCell" in tutorial
    assert any("SimpleChain(" in c for c in _code_blocks(tutorial)), "no code cell"
    shapes = _png_shapes(tutorial)
    assert shapes, "no inline PNG figure in the tutorial"
    assert all(s[0] >= 100 and s[1] >= 100 for s in shapes), shapes
