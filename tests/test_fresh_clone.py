"""The README's test command passes on a fresh clone: without torch, without
``../shared`` beside the clone, with only the ``test`` extra installed.

Each cause that once broke it has a check here that runs in every
configuration (``.ci/run`` also runs the suite in a new virtualenv without
torch, in a clone with no ``../shared`` beside it):

* a test module that imports torch at collection (the MLP tests must skip);
* a test that reads a file outside the repository (``../shared``);
* a module the tests import that no declared requirement installs
  (``Cython``, absent after pip's isolated build);
* ``python`` in the documentation's examples started without the
  virtualenv's packages (``tests/test_doc_examples.py`` checks that one).
"""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: import names whose distribution is named otherwise
DISTRIBUTION_OF = {"sklearn": "scikit-learn", "mpl_toolkits": "matplotlib",
                   "dateutil": "python-dateutil", "yaml": "pyyaml"}
#: what installs with a declared distribution (its own requirements)
COMES_WITH = {"threadpoolctl": "scikit-learn", "xarray": "arviz", "distributed": "dask",
              "_pytest": "pytest", "sphinx_gallery": "sphinx-gallery"}


def _test_files():
    return sorted(TESTS.glob("*.py"))


def _local_modules():
    return {p.stem for p in _test_files()} | {"skbayes_sg", "tests", "conftest"}


def _guarded(tree):
    """Nodes inside ``try`` blocks that catch ImportError (optional imports)."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            names = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
            if any("ImportError" in n or "ModuleNotFoundError" in n or "Exception" in n
                   for n in names):
                guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return guarded


def _unconditional_imports(path):
    """Top-level names of the absolute imports in ``path`` that are neither
    guarded by ``try/except ImportError`` nor preceded by
    ``pytest.importorskip`` of the same name in that file."""
    source = path.read_text()
    tree = ast.parse(source)
    skipped = set(re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", source))
    skipped = {name.split(".")[0] for name in skipped}
    guarded = _guarded(tree)
    found = {}
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in skipped:
                found.setdefault(top, node.lineno)
    return found


def _declared_distributions():
    try:
        import tomllib
    except ImportError:                                  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = meta["dependencies"] + meta["optional-dependencies"]["test"]
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower().replace("_", "-")
            for r in requirements}


def test_every_module_the_tests_import_is_declared():
    """A module a test imports without a skip is installed by the package's
    requirements or its ``test`` extra (``pip install -e ".[test]"`` on a
    bare machine); an optional one is imported behind
    ``pytest.importorskip`` or ``try/except ImportError``."""
    declared = _declared_distributions()
    local, stdlib = _local_modules(), set(sys.stdlib_module_names)
    missing = []
    for path in _test_files():
        for top, line in _unconditional_imports(path).items():
            if top in stdlib or top in local:
                continue
            dist = COMES_WITH.get(top, DISTRIBUTION_OF.get(top, top)).lower().replace("_", "-")
            if dist not in declared:
                missing.append(f"{path.name}:{line} imports {top} ({dist})")
    assert not missing, ("modules the tests import that the test extra does not install: "
                         + "; ".join(missing))


def test_the_import_check_finds_an_undeclared_module(tmp_path, monkeypatch):
    """The check above fails on a module that nothing declares."""
    bad = tmp_path / "test_bad.py"
    bad.write_text("import numpy\nimport not_a_declared_package\n"
                   "torch = __import__('pytest').importorskip('torch')\nimport torch\n")
    found = _unconditional_imports(bad)
    assert "not_a_declared_package" in found and "numpy" in found and "torch" not in found


#: a path that reaches outside the repository for data
_OUTSIDE = re.compile(r"""parents\[\d+\]\s*/\s*["']shared["']|["']\.\./shared|shared/data""")


def test_no_test_reads_files_outside_the_repository():
    """A fresh clone has no ``../shared``: the data a test reads ships in
    ``tests/data`` (``tests/_datasets.py``)."""
    readers = [f"{p.name}:{i}" for p in _test_files() if p.name != Path(__file__).name
               for i, line in enumerate(p.read_text().splitlines(), 1)
               if _OUTSIDE.search(line) and not line.lstrip().startswith("#")]
    assert readers == [], readers


def test_shipped_dataset_is_the_documented_one():
    try:
        from ._datasets import australian_scale
    except ImportError:
        from _datasets import australian_scale
    X, y = australian_scale()
    assert X.shape == (690, 14) and sorted(set(y)) == [-1.0, 1.0]
    assert int((y > 0).sum()) == 307           # as shared/data/README.md
    assert X.min() >= -1.0 and X.max() <= 1.0


def test_the_suite_collects_without_torch():
    """With torch unimportable, collection succeeds and every MLP test
    module is skipped (none imports torch at module level unguarded)."""
    # a finder that refuses torch (a None in sys.modules would confuse the
    # libraries that look for torch there, such as scipy's array API check);
    # collected in this one process (-n 0): xdist's workers would not have it
    code = ("import sys\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "import pytest\n"
            f"sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', '-n', '0', "
            f"'-m', '', {str(TESTS)!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert re.search(r"^\d+ tests collected", out, re.M), out[-2000:]
    for module in sorted(TESTS.glob("test_mlp*.py")):
        assert f"{module.name}::" not in out, f"{module.name} collected tests without torch"
        assert re.search(rf"SKIPPED \[\d+\] tests/{module.name}:\d+: could not import "
                         "'torch'", out), f"{module.name} is not reported skipped"
