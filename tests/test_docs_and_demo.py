"""The documentation builds warning-free, and ``python -m skbayes_sg demo`` runs."""
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC_DIR = REPO_ROOT / "doc"


# ------------------------------------------------------------------- docs
def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("sphinx_gallery")
    pytest.importorskip("matplotlib")
    from sphinx.cmd.build import build_main

    out = tmp_path / "html"
    # -W: any warning (broken reference, malformed docstring, missing page)
    # fails the build
    status = build_main(["-W", "-b", "html", "-q", str(DOC_DIR), str(out)])
    assert status == 0, "sphinx-build -W failed; run it by hand to see the warnings"
    for page in ("index", "install", "user_guide", "api", "architecture", "references"):
        assert (out / f"{page}.html").is_file(), page
    api = (out / "api.html").read_text(encoding="utf-8")
    assert "SGMCMCLogisticRegression" in api and "SGMCMCRidge" in api
    ridge = (out / "generated" / "skbayes_sg.SGMCMCRidge.html").read_text(encoding="utf-8")
    # the numpydoc sections of the estimator's docstring were rendered
    assert "sample_y" in ridge and "step_size" in ridge

    # the gallery: sphinx-gallery ran every doc/examples/plot_*.py (a failing
    # example fails the build) and each page shows the figures it drew
    # (the ArviZ and network examples only print a note without arviz, torch)
    try:
        import arviz  # noqa: F401
        have_arviz = True
    except ImportError:
        have_arviz = False
    try:  # the network example likewise without torch
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    scripts = sorted((DOC_DIR / "examples").glob("plot_*.py"))
    assert scripts, "no gallery examples found"
    gallery = out / "auto_examples"
    index = (gallery / "index.html").read_text(encoding="utf-8")
    assert "auto_examples/index.html" in (out / "index.html").read_text(encoding="utf-8")
    for script in scripts:
        name = script.stem
        assert f"{name}.html" in index, name
        page = (gallery / f"{name}.html").read_text(encoding="utf-8")
        images = set(re.findall(rf'src="\.\./(_images/sphx_glr_{name}_\d+\.png)"', page))
        text = script.read_text(encoding="utf-8")
        if ((not have_arviz and "import arviz" in text)
                or (not have_torch and "import torch" in text)):
            continue
        assert images, f"{name}: no figure on its page"
        for image in images:
            assert (out / image).is_file() and (out / image).stat().st_size > 1000, image


# ------------------------------------------------------------------- command line
def test_help_lists_the_demo_command(capsys):
    from skbayes_sg.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "demo" in capsys.readouterr().out


def test_no_command_prints_usage(capsys):
    from skbayes_sg.__main__ import main

    assert main([]) == 2
    assert "usage" in capsys.readouterr().out


def test_module_entry_point_help():
    # `python -m skbayes_sg --help` in a fresh interpreter
    proc = subprocess.run([sys.executable, "-m", "skbayes_sg", "demo", "--help"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                          env=_env_with_repo_on_path())
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout and "--seed" in proc.stdout


def _env_with_repo_on_path():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


# ------------------------------------------------------------------- demo
@pytest.fixture(scope="module")
def quick_demo():
    from skbayes_sg._demo import run_demo

    out = io.StringIO()
    results = run_demo(quick=True, seed=0, n_jobs=2, out=out)
    return results, out.getvalue()


def test_demo_cli_quick(capsys):
    from skbayes_sg.__main__ import main

    assert main(["demo", "--quick", "--seed", "1", "--n-jobs", "2"]) == 0
    text = capsys.readouterr().out
    assert "== Breast cancer" in text and "== Wine" in text and "== Diabetes" in text
    # the held-out accuracy printed for each sampler on breast cancer
    rows = re.findall(r"^(auto|sgld|sghmc|psgld) \(([\w-]+)(?:, [\w-]+)?\)\s+([0-9.]+)\s+"
                      r"([0-9.]+)", text, re.M)
    assert len(rows) == 8  # 4 samplers x 2 classification datasets
    for sampler, _, accuracy, _ in rows[:4]:
        assert float(accuracy) > 0.9, (sampler, accuracy)


def test_demo_report_sections(quick_demo):
    _, text = quick_demo
    for section in ("== Breast cancer: SGMCMCLogisticRegression (binary",
                    "== Wine: SGMCMCLogisticRegression (multinomial, 3 classes",
                    "== Diabetes: SGMCMCRidge",
                    "sklearn LogisticRegression", "sklearn Ridge",
                    "Posterior summary, sampler=auto", "Posterior summary, sampler=sgld",
                    "Posterior summary, sampler=psgld", "Posterior summary, sampler=sghmc",
                    "Laplace sd", "exact sd", "step", "passes", "ESS/target", "R-hat",
                    "Total time"):
        assert section in text, section


def test_demo_numbers_are_sane(quick_demo):
    results, _ = quick_demo
    for sampler in ("auto", "sgld", "psgld", "sghmc"):
        bc = results["breast_cancer"][sampler]
        assert bc["accuracy"] > 0.9
        assert 0 < bc["log_loss"] < 0.3
        assert bc["step_size"] > 0 and bc["n_grad_evals"] > 0 and bc["fit_time"] > 0
        assert bc["passes"] <= 10000 * 1.05
        assert results["wine"][sampler]["accuracy"] > 0.85

        ridge = results["diabetes"][sampler]
        # sklearn's Ridge gets ~56 on this split; the target sd is ~77
        assert ridge["rmse"] < 65
        assert abs(ridge["rmse"] - results["diabetes"]["sklearn"]["rmse"]) < 5
        assert 0.75 <= ridge["coverage"] <= 1.0
        assert -7 < ridge["mean_log_pred"] < -4
        # even short chains spread over a fair part of the posterior
        assert 0.1 < ridge["sd_ratio"] < 1.5
    # the defaults reach their target within the quick budget and match the
    # reference sds (Laplace / exact) closely
    for data in ("breast_cancer", "wine", "diabetes"):
        auto = results[data]["auto"]
        assert auto["ess"] >= auto["target_ess"] and auto["rhat"] <= 1.01, (data, auto)
        assert 0.9 < auto["sd_ratio"] < 1.1, (data, auto["sd_ratio"])
    assert results["breast_cancer"]["sklearn"]["accuracy"] > 0.9


# ------------------------------------------------------------------- README claims
def _copy_cases():
    import numpy as np
    import scipy.sparse as sp

    A = np.random.default_rng(0).normal(size=(40, 4))
    return {
        # sampled in place
        "C float64": (A, False), "C float32": (A.astype(np.float32), False),
        "read-only": (np.frombuffer(A.tobytes()).reshape(A.shape), False),
        "CSR float64": (sp.csr_matrix(A), False),
        "CSR float32": (sp.csr_matrix(A.astype(np.float32)), False),
        "csr_array": (sp.csr_array(A), False),
        # copied once, as the README says
        "Fortran": (np.asfortranarray(A), True), "column slice": (A[:, :2], True),
        "row stride": (A[::2], True), "int64": ((10 * A).astype(np.int64), True),
        "CSC": (sp.csc_matrix(A), True), "COO": (sp.coo_matrix(A), True),
    }


@pytest.mark.parametrize("case", list(_copy_cases()))
def test_readme_says_which_inputs_are_copied(case):
    # README, "What fit does": C-contiguous float32/float64 arrays and CSR are
    # read in place; CSC, COO, Fortran-ordered, strided and integer X are copied
    import numpy as np
    import scipy.sparse as sp
    from skbayes_sg import SGMCMCLogisticRegression

    X, copied = _copy_cases()[case]
    y = np.arange(X.shape[0]) % 2
    Xv, _ = SGMCMCLogisticRegression()._validate_X_y(X, y, reset=True)  # what fit samples
    if sp.issparse(X):
        assert sp.issparse(Xv) and Xv.format == "csr"
        shared = np.shares_memory(X.data, Xv.data)
    else:
        assert Xv.flags.c_contiguous and Xv.dtype in (np.float32, np.float64)
        shared = np.shares_memory(X, Xv)
    assert shared is not copied, (case, "should be copied" if copied else "should be read in place")
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "CSC, COO" in readme and "without a copy" in readme
