"""``python -m skbayes_sg fit``: CSV and libsvm files in, report and ``.npz`` out.

Every test writes a small data file to ``tmp_path`` and runs the command in
this process (its parser is built from ``_cli_fit.add_arguments``, as
``__main__`` builds it).
"""
import argparse
import gzip
import json
import sys

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file
from sklearn.linear_model import Ridge
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from skbayes_sg import _cli_fit

SHORT = ["--n-samples", "60", "--n-warmup", "200", "--thin", "2", "--n-chains", "2"]


def _run(argv, capsys=None):
    parser = argparse.ArgumentParser(prog="python -m skbayes_sg fit")
    _cli_fit.add_arguments(parser)
    status = _cli_fit.run(parser.parse_args([str(a) for a in argv]))
    if capsys is None:
        return status
    out = capsys.readouterr()
    return status, out.out, out.err


def _classification_rows(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1.0, 2.0, 0.5] + [0.0, 1.0, -3.0]
    y = np.array(["low", "high"])[(X @ [1.5, -1.0, 2.0] + 5.0
                                   + rng.logistic(size=n) > 0).astype(int)]
    return X, y


def _write_csv(path, X, y, names, target="label"):
    header = ",".join(names[:1] + [target] + names[1:])   # target not the last column
    lines = [header] + [",".join([f"{r[0]!r}", str(t)] + [repr(v) for v in r[1:]])
                        for r, t in zip(X.tolist(), y)]
    text = "\n".join(lines) + "\n"
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def csv_classification(tmp_path):
    X, y = _classification_rows()
    path = _write_csv(tmp_path / "train.csv.gz", X, y, ["height", "dose", "weight"])
    return path, X, y


def test_csv_logistic_report_and_npz(csv_classification, tmp_path, capsys):
    path, X, y = csv_classification
    out = tmp_path / "draws.npz"
    status, text, err = _run([path, "--target", "label", "--model", "logistic",
                              "--standardize", "--out", out, "--seed", "1", *SHORT], capsys)
    assert status == 0, err
    assert f"{path} (240 rows x 3 features, dense)" in text
    assert "192 training / 48 held-out rows; features standardised" in text
    header = next(line for line in text.splitlines() if line.startswith("parameter"))
    assert header.split() == ["parameter", "mean", "sd", "5%", "50%", "95%", "ess_bulk",
                              "ess_tail", "r_hat"]
    for name in ("height", "dose", "weight", "intercept"):
        assert any(line.startswith(name + " ") for line in text.splitlines()), name
    assert "Convergence" in text
    accuracy = float(text.split("Held-out: accuracy ")[1].split(",")[0])
    log_loss = float(text.split("log-loss ")[1].split()[0])
    assert accuracy > 0.75 and 0 < log_loss < 0.6

    saved = np.load(out, allow_pickle=False)            # no pickled objects
    assert saved["coef_samples"].shape == (2, 60, 3)
    assert saved["intercept_samples"].shape == (2, 60)
    assert list(saved["feature_names"]) == ["height", "dose", "weight"]
    assert list(saved["classes"]) == ["high", "low"]
    assert list(saved["summary_index"]) == ["height", "dose", "weight", "intercept"]
    assert saved["summary_values"].shape == (4, 8)
    X_tr = train_test_split(X, y, test_size=0.2, random_state=1, stratify=y)[0]
    scaler = StandardScaler().fit(X_tr)
    np.testing.assert_allclose(saved["x_mean"], scaler.mean_)
    np.testing.assert_allclose(saved["x_scale"], scaler.scale_)
    meta = json.loads(str(saved["metadata"]))
    assert meta["model"] == "logistic" and meta["format"] == "csv"
    assert meta["target"] == "label" and meta["n_train"] == 192 and meta["n_test"] == 48
    assert meta["params"]["n_samples"] == 60 and meta["params"]["random_state"] == 1
    assert meta["metrics"]["accuracy"] == pytest.approx(accuracy, abs=1e-4)
    assert meta["step_size"] > 0 and meta["n_grad_evals"] > 0


def test_same_seed_same_draws(csv_classification, tmp_path):
    path, _, _ = csv_classification
    for name in ("a.npz", "b.npz"):
        assert _run([path, "--target", "label", "--model", "logistic", "--out",
                     tmp_path / name, "--n-jobs", "2", *SHORT]) == 0
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    np.testing.assert_array_equal(a["coef_samples"], b["coef_samples"])


def test_csv_ridge_metrics_in_original_units(tmp_path, capsys):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 4))
    y = 100.0 + X @ [10.0, -5.0, 0.0, 3.0] + rng.normal(scale=4.0, size=300)
    path = _write_csv(tmp_path / "reg.csv", X, y, ["a", "b", "c", "d"], target="price")
    status, text, err = _run([path, "--target", "price", "--model", "ridge", "--standardize",
                              "--sampler", "sghmc", "--out", tmp_path / "reg",
                              "--n-samples", "200", "--thin", "5", "--n-chains", "2"], capsys)
    assert status == 0, err
    rmse = float(text.split("Held-out: RMSE ")[1].split(",")[0])
    lpd = float(text.split("mean log predictive density ")[1].split()[0])
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0)
    ref = Ridge(alpha=1e-3).fit(X_tr, y_tr)
    ref_rmse = np.sqrt(np.mean((ref.predict(X_te) - y_te) ** 2))
    assert abs(rmse - ref_rmse) < 0.1 * ref_rmse
    # a Gaussian with sd ~4 has mean log density ~ -0.5 log(2 pi e 16) = -2.8
    assert -3.5 < lpd < -2.3
    saved = np.load(tmp_path / "reg.npz")                # the suffix was added
    meta = json.loads(str(saved["metadata"]))
    assert meta["y_mean"] == pytest.approx(y_tr.mean()) and meta["noise_var"] > 0
    assert "classes" not in saved.files


def test_libsvm_logistic_and_ridge(tmp_path, capsys):
    X, y = _classification_rows(seed=3)
    X[np.abs(X) < 0.5] = 0.0                             # some sparsity
    path = tmp_path / "data.svm"
    dump_svmlight_file(X, (y == "high").astype(int) * 2 - 1, str(path))
    status, text, err = _run([path, "--libsvm", "--model", "logistic", "--out",
                              tmp_path / "l.npz", "--subsampling", "cv", *SHORT], capsys)
    assert status == 0, err
    assert "(240 rows x 3 features, CSR)" in text
    assert any(line.startswith("x2 ") for line in text.splitlines())
    saved = np.load(tmp_path / "l.npz")
    np.testing.assert_array_equal(saved["classes"], [-1, 1])
    assert list(saved["feature_names"]) == ["x0", "x1", "x2"]

    dump_svmlight_file(X, X @ [1.0, 2.0, 3.0], str(path))
    status, text, err = _run([path, "--libsvm", "--model", "ridge", "--standardize",
                              "--test-size", "0", "--out", tmp_path / "r.npz", *SHORT], capsys)
    assert status == 0, err
    assert "all 240 rows for training (no held-out rows)" in text
    assert "Held-out" not in text
    saved = np.load(tmp_path / "r.npz")
    assert np.all(saved["x_mean"] == 0)                  # sparse: scaled, not centred


def test_long_summaries_are_cut_but_saved_whole(tmp_path, capsys):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(100, 45))
    path = tmp_path / "wide.svm"
    dump_svmlight_file(X, X[:, 0] + rng.normal(size=100), str(path))
    status, text, err = _run([path, "--libsvm", "--model", "ridge", "--out", tmp_path / "w",
                              *SHORT], capsys)
    assert status == 0, err
    assert "... 6 more rows (all of them are saved with --out); largest R-hat: " in text
    assert not any(line.startswith("x44 ") for line in text.splitlines())
    saved = np.load(tmp_path / "w.npz")
    assert saved["summary_values"].shape == (46, 8) and saved["summary_index"][-1] == "intercept"


def test_csv_reader_without_pandas_matches(csv_classification, monkeypatch):
    path, X, y = csv_classification
    pytest.importorskip("pandas")
    X1, y1, names1 = _cli_fit.load_csv(path, "label")
    monkeypatch.setitem(sys.modules, "pandas", None)
    X2, y2, names2 = _cli_fit.load_csv(path, "label")
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(X2, X)
    assert list(y1) == list(y2) == list(y)
    assert names1 == names2 == ["height", "dose", "weight"]


@pytest.mark.parametrize("pandas", [True, False])
def test_csv_numeric_targets_keep_their_type(tmp_path, monkeypatch, pandas):
    if not pandas:
        monkeypatch.setitem(sys.modules, "pandas", None)
    else:
        pytest.importorskip("pandas")
    path = tmp_path / "t.csv"
    path.write_text("a,k,v\n1.5,0,0.25\n2.5,2,1.5\n3.5,1,-2\n")
    X, k, _ = _cli_fit.load_csv(path, "k")
    assert k.dtype.kind == "i" and list(k) == [0, 2, 1]
    _, v, names = _cli_fit.load_csv(path, "v")
    assert v.dtype.kind == "f" and list(v) == [0.25, 1.5, -2.0] and names == ["a", "k"]


@pytest.mark.parametrize("pandas", [True, False])
def test_bad_csv_files_are_reported(tmp_path, capsys, monkeypatch, pandas):
    if not pandas:
        monkeypatch.setitem(sys.modules, "pandas", None)
    elif "pandas" not in sys.modules:
        pytest.importorskip("pandas")
    good = tmp_path / "good.csv"
    good.write_text("a,b,y\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n")
    status, _, err = _run([good, "--target", "label", "--model", "logistic",
                           "--out", tmp_path / "o"], capsys)
    assert status == 2 and "no column 'label'" in err and "['a', 'b', 'y']" in err

    text = tmp_path / "text.csv"
    text.write_text("a,colour,y\n1,red,0\n3,blue,1\n")
    status, _, err = _run([text, "--target", "y", "--model", "logistic",
                           "--out", tmp_path / "o"], capsys)
    assert status == 2 and "non-numeric" in err and "colour" in err

    missing = tmp_path / "missing.csv"
    missing.write_text("a,b,y\n1,,0\n3,4,1\n")
    status, _, err = _run([missing, "--target", "y", "--model", "logistic",
                           "--out", tmp_path / "o"], capsys)
    assert status == 2 and "missing" in err and "['b']" in err

    labels = tmp_path / "labels.csv"
    labels.write_text("a,y\n1,cat\n2,dog\n")
    status, _, err = _run([labels, "--target", "y", "--model", "ridge",
                           "--out", tmp_path / "o"], capsys)
    assert status == 2 and "numeric target" in err

    status, _, err = _run([tmp_path / "absent.csv", "--target", "y", "--model", "ridge",
                           "--out", tmp_path / "o"], capsys)
    assert status == 2 and "absent.csv" in err


@pytest.mark.parametrize("pandas", [True, False])
def test_empty_and_binary_files_are_named(tmp_path, capsys, monkeypatch, pandas):
    if not pandas:
        monkeypatch.setitem(sys.modules, "pandas", None)
    elif "pandas" not in sys.modules:
        pytest.importorskip("pandas")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)) * 8)
    for path in (empty, binary):
        status, _, err = _run([path, "--target", "y", "--model", "logistic",
                               "--out", tmp_path / "o"], capsys)
        assert status == 2 and path.name in err, err
    status, _, err = _run([binary, "--libsvm", "--model", "logistic",
                           "--out", tmp_path / "o"], capsys)
    assert status == 2 and "binary.csv" in err, err


def test_unwritable_out_fails_before_the_fit(csv_classification, tmp_path, capsys,
                                             monkeypatch):
    path, _, _ = csv_classification
    def fit(self, *args, **kwargs):
        raise AssertionError("the fit ran before --out was checked")
    monkeypatch.setattr(_cli_fit.SGMCMCLogisticRegression, "fit", fit)
    status, _, err = _run([path, "--target", "label", "--model", "logistic",
                           "--out", tmp_path / "no" / "such" / "dir" / "o"], capsys)
    assert status == 2 and "--out" in err and "does not exist" in err
    (tmp_path / "taken.npz").mkdir()
    status, _, err = _run([path, "--target", "label", "--model", "logistic",
                           "--out", tmp_path / "taken"], capsys)
    assert status == 2 and "is a directory" in err


def test_bad_settings_and_divergence_are_reported(csv_classification, tmp_path, capsys):
    path, _, _ = csv_classification
    status, _, err = _run([path, "--target", "label", "--model", "logistic", "--n-samples",
                           "0", "--out", tmp_path / "o"], capsys)
    assert status == 2 and "n_samples" in err
    # (a Metropolis-adjusted sampler rejects a step too large instead of diverging)
    status, _, err = _run([path, "--target", "label", "--model", "logistic", "--sampler",
                           "sghmc", "--subsampling", "uniform", "--step-size", "1e6",
                           "--out", tmp_path / "o", *SHORT], capsys)
    assert status == 1 and "diverged" in err and "step_size" in err
    assert not (tmp_path / "o.npz").exists()


def test_target_or_libsvm_is_required(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _run([tmp_path / "x.csv", "--model", "ridge", "--out", tmp_path / "o"])
    assert exc.value.code == 2
    assert "--target" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _run([tmp_path / "x.csv", "--target", "y", "--libsvm", "--model", "ridge",
              "--out", tmp_path / "o"])


def test_step_size_and_batch_size_options(csv_classification, tmp_path):
    path, _, _ = csv_classification
    assert _run([path, "--target", "label", "--model", "logistic", "--step-size", "0.001",
                 "--batch-size", "20", "--out", tmp_path / "o.npz", *SHORT]) == 0
    meta = json.loads(str(np.load(tmp_path / "o.npz")["metadata"]))
    assert meta["params"]["step_size"] == 0.001 and meta["params"]["batch_size"] == 20
    assert meta["step_size"] == 0.001


def test_python_m_skbayes_sg_fit(csv_classification, tmp_path, capsys):
    from skbayes_sg import __main__

    if "fit" not in __main__.COMMANDS:
        pytest.skip("the fit command is not registered in skbayes_sg.__main__.COMMANDS")
    path, _, _ = csv_classification
    assert __main__.main(["fit", str(path), "--target", "label", "--model", "logistic",
                          "--out", str(tmp_path / "m.npz"), *SHORT]) == 0
    assert "Held-out: accuracy" in capsys.readouterr().out


def test_out_is_optional(csv_classification, tmp_path, capsys, monkeypatch):
    path, _, _ = csv_classification
    monkeypatch.chdir(tmp_path)
    status, out, _ = _run([path, "--target", "label", "--model", "logistic", *SHORT], capsys)
    assert status == 0 and "Posterior summary" in out and "Saved" not in out
    assert not list(tmp_path.glob("*.npz"))
