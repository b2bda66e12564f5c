"""``python -m skbayes_sg fit``: CSV and libsvm files in, report and ``.npz`` out.

Every test writes a small data file to ``tmp_path`` and runs the command in
this process (its parser is built from ``_cli_fit.add_arguments``, as
``__main__`` builds it).
"""
import argparse
import gzip
import io
import json
import sys
import warnings

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


def _csv_reader(monkeypatch, pandas):
    """Read CSV files with pandas, or (pandas=False) with the stdlib reader."""
    if not pandas:
        monkeypatch.setitem(sys.modules, "pandas", None)
    else:
        pytest.importorskip("pandas")


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
    _csv_reader(monkeypatch, pandas)
    path = tmp_path / "t.csv"
    path.write_text("a,k,v\n1.5,0,0.25\n2.5,2,1.5\n3.5,1,-2\n")
    X, k, _ = _cli_fit.load_csv(path, "k")
    assert k.dtype.kind == "i" and list(k) == [0, 2, 1]
    _, v, names = _cli_fit.load_csv(path, "v")
    assert v.dtype.kind == "f" and list(v) == [0.25, 1.5, -2.0] and names == ["a", "k"]


@pytest.mark.parametrize("pandas", [True, False])
def test_bad_csv_files_are_reported(tmp_path, capsys, monkeypatch, pandas):
    _csv_reader(monkeypatch, pandas)
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
    _csv_reader(monkeypatch, pandas)
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


def test_ctrl_c_in_a_fit_prints_what_it_left_and_exits_130(csv_classification, capsys,
                                                            monkeypatch):
    """Ctrl-C: the fit's note on stderr (what the interrupted call left), no
    traceback through the sampler, and the status a shell gives SIGINT."""
    from skbayes_sg import __main__
    from skbayes_sg._sampling import _schedule

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(_schedule, "run", interrupted)
    path, _, _ = csv_classification
    assert __main__.main(["fit", str(path), "--target", "label", "--model", "logistic",
                          *SHORT]) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-2:] == [
        "interrupted", "SGMCMCLogisticRegression.fit was interrupted: the draws of this call "
        "were discarded and the estimator is unfitted, as it was before the call."]
    assert "Traceback" not in err


def test_out_is_optional(csv_classification, tmp_path, capsys, monkeypatch):
    path, _, _ = csv_classification
    monkeypatch.chdir(tmp_path)
    status, out, _ = _run([path, "--target", "label", "--model", "logistic", *SHORT], capsys)
    assert status == 0 and "Posterior summary" in out and "Saved" not in out
    assert not list(tmp_path.glob("*.npz"))


# ------------------------------------------------------- generated estimator flags
def _parser():
    parser = argparse.ArgumentParser(prog="python -m skbayes_sg fit")
    _cli_fit.add_arguments(parser)
    return parser


def _flag_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


@pytest.mark.parametrize("model", sorted(_cli_fit.MODELS))
def test_every_estimator_parameter_has_a_flag(model):
    """Each get_params() key has a flag that sets it, or a reason in SKIPPED;
    a generated flag given the estimator's default passes that default."""
    parser = _parser()
    options = parser._option_string_actions
    generated = _cli_fit.generated_flags()
    params = _cli_fit.MODELS[model]().get_params(deep=False)
    for name, default in params.items():
        if name in _cli_fit.SKIPPED:
            assert _cli_fit.SKIPPED[name], name
            continue
        if name in _cli_fit.HAND_WRITTEN:
            assert _cli_fit.HAND_WRITTEN[name] in options, name
            assert name not in generated, name
            continue
        assert name in generated, f"{name} of --model {model} has no flag and no reason"
        flag = generated[name]
        assert flag["flag"] == "--" + name.replace("_", "-") and flag["flag"] in options
        args = parser.parse_args(["d.csv", "--target", "y", "--model", model,
                                  flag["flag"], _flag_text(default)])
        assert _cli_fit.estimator_params(args)[name] == default, name
    # the flags not given are not passed: the estimator's defaults apply
    args = parser.parse_args(["d.csv", "--target", "y", "--model", model])
    assert not set(_cli_fit.estimator_params(args)) & set(generated)


def test_generated_flags_parse_values_as_the_constraints_allow():
    parser = _parser()
    argv = ["d.csv", "--target", "y", "--model", "ridge"]
    args = parser.parse_args(argv + [
        "--friction", "2", "--n-leapfrog", "7", "--metropolis", "false", "--max-passes",
        "none", "--pv-threshold", "pilot", "--noise-var", "0.5", "--fit-intercept", "True",
        "--ewsg-x", "momentum-stop", "--access", "cyclic", "--snapshot-period", "auto"])
    params = _cli_fit.estimator_params(args)
    assert params["friction"] == 2.0 and isinstance(params["friction"], float)
    assert params["n_leapfrog"] == 7 and isinstance(params["n_leapfrog"], int)
    assert params["metropolis"] is False and params["fit_intercept"] is True
    assert params["max_passes"] is None and params["pv_threshold"] == "pilot"
    assert params["noise_var"] == 0.5 and params["ewsg_x"] == "momentum-stop"
    assert params["access"] == "cyclic" and params["snapshot_period"] == "auto"
    for bad in (["--friction", "fast"], ["--friction", "0"], ["--n-leapfrog", "2.5"],
                ["--metropolis", "maybe"], ["--access", "sorted"], ["--temperature", "hot"]):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv + bad)
        assert exc.value.code == 2, bad


def test_generated_flags_reach_the_estimator(csv_classification, tmp_path, capsys):
    path, _, _ = csv_classification
    status, text, err = _run([path, "--target", "label", "--model", "logistic",
                              "--temperature", "1", "--friction", "2", "--sampler", "sghmc",
                              "--subsampling", "uniform", "--access", "reshuffle",
                              "--standardize", "--out", tmp_path / "g.npz", "--n-samples",
                              "60", "--n-warmup", "200", "--n-chains", "2"], capsys)
    assert status == 0, err
    assert "friction=2.0" in text and "access='reshuffle'" in text
    meta = json.loads(str(np.load(tmp_path / "g.npz")["metadata"]))
    assert meta["params"]["temperature"] == 1.0 and meta["params"]["friction"] == 2.0
    assert meta["params"]["sampler"] == "sghmc" and meta["params"]["subsampling"] == "uniform"
    assert meta["params"]["access"] == "reshuffle"


def test_flag_of_the_other_model_is_an_error(csv_classification, tmp_path, capsys,
                                             monkeypatch):
    path, _, _ = csv_classification
    def fit(self, *args, **kwargs):
        raise AssertionError("the fit ran despite a flag of the other model")
    monkeypatch.setattr(_cli_fit.SGMCMCLogisticRegression, "fit", fit)
    status, _, err = _run([path, "--target", "label", "--model", "logistic",
                           "--noise-var", "1"], capsys)
    assert status == 2
    assert "--noise-var" in err and "--model logistic" in err and "ridge" in err


MLP_SHORT = ["--hidden-layer-sizes", "8", "--n-samples", "40", "--n-warmup", "300",
             "--thin", "2", "--n-chains", "2"]


def test_mlp_validation_fraction_reports_the_held_out_check(csv_classification, tmp_path,
                                                           capsys):
    """--validation-fraction: the report's convergence check is the fit's own,
    on the held-out rows (saved in the metadata), not R-hat."""
    pytest.importorskip("torch")
    path, X, y = csv_classification
    out = tmp_path / "net.npz"
    status, text, err = _run([path, "--target", "label", "--model", "mlp", "--standardize",
                              "--validation-fraction", "0.25", "--out", out, *MLP_SHORT],
                             capsys)
    assert status == 0, err
    assert "validation_fraction=0.25" in text
    assert "Split R-hat" not in text       # check_convergence's advice is not the check
    meta = json.loads(str(np.load(out, allow_pickle=False)["metadata"]))
    check = meta["diagnostics"]["validation"]
    assert check["n_rows"] == 48                     # a quarter of the 192 training rows
    converged = check["bias"] <= 0.01 and check["se"] <= 0.01
    assert ("Convergence: the run checked on 48 held-out rows" in text) is converged
    assert ("Convergence warning: The model average is not yet reliable" in text) is not converged


def test_csv_mlp_report_and_npz(csv_classification, tmp_path, capsys):
    """--model mlp fits the network, prints a short summary (not a row per
    parameter), the convergence check and the held-out metrics, and saves
    the draws."""
    pytest.importorskip("torch")
    path, X, y = csv_classification
    out = tmp_path / "net.npz"
    status, text, err = _run([path, "--target", "label", "--model", "mlp", "--standardize",
                              "--activation", "tanh", "--out", out, *MLP_SHORT], capsys)
    assert status == 0, err
    assert "SGMCMCMLPClassifier(hidden_layer_sizes=(8,), sampler='sgld'" in text
    assert "activation='tanh'" in text
    assert "192 training / 48 held-out rows; features standardised" in text
    assert "Posterior summary (41 parameters, layers 3-8-1, tanh; 2 chains x 40 draws" in text
    assert "parameters: bulk ESS min " in text and "R-hat min " in text
    assert "log-likelihood of 192 training rows per draw" in text
    assert "Convergence" in text
    assert not any(line.startswith("parameter ") for line in text.splitlines())  # no table
    held_out = text.split("Held-out: accuracy ")[1].splitlines()[0]
    accuracy = float(held_out.split(",")[0])
    log_loss = float(held_out.split("log-loss ")[1].split()[0])
    assert accuracy > 0.75 and 0 < log_loss < 0.6

    saved = np.load(out, allow_pickle=False)
    assert saved["coef_samples"].shape == (2, 40, 41)
    assert list(saved["layer_sizes"]) == [3, 8, 1]
    assert saved["ess_bulk"].shape == saved["r_hat"].shape == (41,)
    assert saved["log_likelihood_trace"].shape == (2, 40)
    assert np.all(saved["log_likelihood_trace"] < 0)
    assert list(saved["classes"]) == ["high", "low"]
    assert list(saved["feature_names"]) == ["height", "dose", "weight"]
    meta = json.loads(str(saved["metadata"]))
    assert meta["model"] == "mlp" and meta["estimator"] == "SGMCMCMLPClassifier"
    assert meta["activation"] == "tanh" and meta["n_params"] == 41
    assert meta["params"]["n_chains"] == 2 and meta["params"]["random_state"] == 0
    assert meta["metrics"]["accuracy"] == pytest.approx(accuracy, abs=1e-4)
    assert meta["diagnostics"]["trace_rows"] == 192
    # the draws predict as the printed metrics say
    est = _cli_fit.fit_file(path, target="label", model="mlp", standardize=True,
                            estimator_params=_cli_fit.estimator_params(_parser().parse_args(
                                ["d", "--target", "label", "--model", "mlp",
                                 "--activation", "tanh", *MLP_SHORT])),
                            stdout=io.StringIO())["estimator"]
    np.testing.assert_array_equal(est.coef_samples_, saved["coef_samples"])


def test_mlp_flags_and_refusals(csv_classification, tmp_path, capsys, monkeypatch):
    """An MLP-only flag with --model logistic, and a linear-only flag, or an
    option the network lacks, with --model mlp: exit status 2 naming the
    flag, before any fit; the network's own refusals, first thing in its fit."""
    path, _, _ = csv_classification
    def fit(self, *args, **kwargs):
        raise AssertionError("the fit ran despite a flag of another model")
    monkeypatch.setattr(_cli_fit.SGMCMCLogisticRegression, "fit", fit)
    monkeypatch.setattr(_cli_fit.SGMCMCMLPClassifier, "fit", fit)
    status, _, err = _run([path, "--target", "label", "--model", "logistic",
                           "--hidden-layer-sizes", "8"], capsys)
    assert status == 2
    assert "--hidden-layer-sizes" in err and "--model logistic" in err and "mlp" in err
    for argv, flag in ((["--noise-var", "1"], "--noise-var"), (["--metric", "dense"], "--metric"),
                       (["--n-jobs", "2"], "--n-jobs"), (["--access", "cyclic"], "--access"),
                       (["--init", "laplace"], "--init")):
        status, _, err = _run([path, "--target", "label", "--model", "mlp", *argv], capsys)
        assert status == 2 and flag in err and "--model mlp" in err, (argv, err)
    # the linear set-up's refusal of a combination is a usage error too
    monkeypatch.undo()
    status, _, err = _run([path, "--target", "label", "--model", "logistic", "--subsampling",
                           "ewsg", "--access", "cyclic"], capsys)
    assert status == 2 and "access='cyclic'" in err
    pytest.importorskip("torch")
    # the network's own refusals are usage errors too: its fit refuses first thing
    # (an InvalidParameterError), and .nc is for the linear models
    monkeypatch.undo()
    status, _, err = _run([path, "--target", "label", "--model", "mlp", "--subsampling",
                           "saga"], capsys)
    assert status == 2 and "saga" in err and "n x n_params" in err
    monkeypatch.setattr(_cli_fit.SGMCMCMLPClassifier, "fit", fit)
    status, _, err = _run([path, "--target", "label", "--model", "mlp", "--out",
                           tmp_path / "o.nc"], capsys)
    assert status == 2 and ".npz" in err


def test_mlp_flag_values():
    parser = _parser()
    argv = ["d.csv", "--target", "y", "--model", "mlp"]
    params = _cli_fit.estimator_params(parser.parse_args(argv + [
        "--hidden-layer-sizes", "16,8", "--device", "cuda:1", "--dtype", "float64",
        "--class-weight", "balanced", "--snapshot-period", "7", "--sampler", "sghmc"]))
    assert params["hidden_layer_sizes"] == (16, 8) and params["device"] == "cuda:1"
    assert params["dtype"] == "float64" and params["class_weight"] == "balanced"
    assert params["snapshot_period"] == 7 and params["sampler"] == "sghmc"
    # "auto" hand-written flags leave the network's defaults; the others are passed
    assert "n_samples" not in params and "subsampling" not in params and "init" not in params
    assert _cli_fit.estimator_params(parser.parse_args(argv + ["--init", "mode"]))["init"] == "mode"
    assert params["n_chains"] == 4 and params["random_state"] == 0
    for text, value in (("()", ()), ("(100,)", (100,)), ("[3, 4]", (3, 4)), ("7", (7,))):
        args = parser.parse_args(argv + ["--hidden-layer-sizes", text])
        assert _cli_fit.estimator_params(args)["hidden_layer_sizes"] == value, text
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv + ["--hidden-layer-sizes", "wide"])
    assert exc.value.code == 2


def test_generated_flags_are_documented():
    import pathlib

    doc = pathlib.Path(__file__).resolve().parents[1] / "doc" / "cli.rst"
    if not doc.exists():
        pytest.skip("doc/cli.rst is not next to the tests")
    text = doc.read_text()
    missing = [f["flag"] for f in _cli_fit.generated_flags().values()
               if f"``{f['flag']}``" not in text]
    assert not missing, f"doc/cli.rst does not list {missing}"


# ------------------------------------------------------------------ netCDF output
def _netcdf_backend():
    pytest.importorskip("arviz")
    for module in ("h5netcdf", "netCDF4"):
        try:
            __import__(module)
            return module
        except ImportError:
            pass
    pytest.skip("no netCDF backend for ArviZ (pip install h5netcdf)")


def test_out_nc_writes_arviz_inference_data(csv_classification, tmp_path, capsys):
    _netcdf_backend()
    import arviz as az

    path, _, _ = csv_classification
    out = tmp_path / "draws.nc"
    status, text, err = _run([path, "--target", "label", "--model", "logistic",
                              "--standardize", "--out", out, *SHORT], capsys)
    assert status == 0, err
    assert f"to {out}" in text and not (tmp_path / "draws.nc.npz").exists()
    idata = az.from_netcdf(str(out))
    for group in ("posterior", "log_likelihood", "observed_data", "sample_stats",
                  "constant_data"):
        assert group in idata.groups(), group
    assert idata.posterior["coef"].shape == (2, 60, 3)
    assert list(idata.posterior["coef_dim"].values) == ["height", "dose", "weight"]
    assert idata.log_likelihood["y"].shape == (2, 60, 192)        # the training rows
    assert sorted(set(idata.observed_data["y"].values.tolist())) == ["high", "low"]
    assert "lp" in idata.sample_stats
    assert np.all(idata.constant_data["x_scale"].values > 0)
    meta = json.loads(idata.posterior.attrs["skbayes_sg_fit"])
    assert meta["model"] == "logistic" and meta["params"]["n_samples"] == 60


def test_out_nc_without_arviz_fails_before_the_fit(csv_classification, tmp_path, capsys,
                                                    monkeypatch):
    path, _, _ = csv_classification
    def fit(self, *args, **kwargs):
        raise AssertionError("the fit ran before the netCDF writer was checked")
    monkeypatch.setattr(_cli_fit.SGMCMCLogisticRegression, "fit", fit)
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "arviz", None)
        status, _, err = _run([path, "--target", "label", "--model", "logistic",
                               "--out", tmp_path / "o.nc"], capsys)
    assert status == 2 and 'pip install "skbayes_sg[arviz]"' in err
    pytest.importorskip("arviz")
    with monkeypatch.context() as m:                     # ArviZ without a netCDF writer
        m.setitem(sys.modules, "h5netcdf", None)
        m.setitem(sys.modules, "netCDF4", None)
        status, _, err = _run([path, "--target", "label", "--model", "logistic",
                               "--out", tmp_path / "o.nc"], capsys)
    assert status == 2 and "h5netcdf" in err and 'skbayes_sg[arviz]' in err
    assert not (tmp_path / "o.nc").exists()


# ------------------------------------------------------------- unscaled features
def test_unscaled_features_warn_and_still_fit(tmp_path, capsys):
    X, y = _classification_rows()
    path = _write_csv(tmp_path / "raw.csv", X * [1.0, 1.0, 1e-3] + [0.0, 0.0, 7.0], y,
                      ["height", "dose", "weight"])
    status, text, err = _run([path, "--target", "label", "--model", "logistic", *SHORT],
                             capsys)
    assert status == 0 and "Posterior summary" in text
    warning = [line for line in err.splitlines() if "unscaled" in line]
    assert len(warning) == 1 and "--standardize" in warning[0] and "weight" in warning[0]
    status, _, err = _run([path, "--target", "label", "--model", "logistic",
                           "--standardize", *SHORT], capsys)
    assert status == 0 and "unscaled" not in err
    status, _, err = _run([tmp_path / "raw.csv", "--target", "label", "--model", "logistic",
                           "--test-size", "0.5", *SHORT], capsys)
    assert "unscaled" in err
    fine = _write_csv(tmp_path / "fine.csv", *_classification_rows(), ["a", "b", "c"])
    status, _, err = _run([fine, "--target", "label", "--model", "logistic", *SHORT], capsys)
    assert status == 0 and "unscaled" not in err


def test_a_fit_warning_is_the_commands_own_and_names_its_option(tmp_path, capsys):
    # the ridge's target far from 0: printed as the command's warning (not a
    # Python warning pointing at runpy), with the option that fixes it
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 2))
    y = X @ [1.0, -1.0] + 150.0 + rng.standard_normal(100)
    path = _write_csv(tmp_path / "far.csv", X, y.tolist(), ["a", "b"], target="t")
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        status, text, err = _run([path, "--target", "t", "--model", "ridge", *SHORT], capsys)
    assert status == 0 and "Posterior summary" in text
    assert not [w for w in escaped if issubclass(w.category, UserWarning)]
    assert err.startswith("python -m skbayes_sg fit: warning (UncentredTargetWarning): "
                          "The mean of y")
    assert "Here: pass --standardize" in err and "runpy" not in err
    status, _, err = _run([path, "--target", "t", "--model", "ridge", "--standardize",
                           *SHORT], capsys)
    assert status == 0 and "warning" not in err


def test_unscaled_rule_dense_and_sparse_without_densifying(monkeypatch):
    import scipy.sparse as sp

    rng = np.random.default_rng(5)
    names = ["a", "b", "c"]
    X = rng.normal(size=(400, 3))
    X[rng.random(size=X.shape) < 0.5] = 0.0
    assert _cli_fit._unscaled(X, names) == ""
    spread = X * [1.0, 1.0, 2000.0]                      # sds span > 1,000
    shifted = X.copy()
    shifted[:, 1] = 1e4 + 0.01 * rng.normal(size=400)    # mean >> 100 sds from 0
    constant = np.column_stack([X, np.full(400, 3.0)])   # a constant column is fine
    monkeypatch.setattr(sp.csr_matrix, "toarray", lambda *a, **k: pytest.fail("densified"))
    monkeypatch.setattr(sp.csr_matrix, "todense", lambda *a, **k: pytest.fail("densified"))
    for data, expected in ((spread, "standard deviations range"),
                           (shifted, "b has mean"), (constant, "")):
        cols = names + ["k"] if data.shape[1] == 4 else names
        dense, sparse = _cli_fit._unscaled(data, cols), _cli_fit._unscaled(
            sp.csr_matrix(data), cols)
        assert (expected in dense) and (expected in sparse)
        assert bool(dense) == bool(expected) == bool(sparse)


def test_libsvm_zero_based_and_n_features(tmp_path, capsys):
    """A zero-based file whose column 0 is empty is read one column short by
    scikit-learn's zero_based="auto" (63 features of 64 before): --zero-based
    yes reads it as written, --n-features gives the width."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 64))
    X[:, 0] = 0.0                                        # column 0 empty
    X[:, -1] = 0.0                                       # and the last one
    y = (X[:, 1] + rng.logistic(size=120) > 0).astype(int)
    path = tmp_path / "zero.svm"
    dump_svmlight_file(X, y, str(path), zero_based=True)
    status, text, err = _run([path, "--libsvm", "--model", "logistic", *SHORT], capsys)
    assert status == 0, err
    assert "(120 rows x 62 features, CSR)" in text       # auto: one-based, 2 short
    status, text, err = _run([path, "--libsvm", "--zero-based", "yes", "--model",
                              "logistic", *SHORT], capsys)
    assert status == 0, err
    assert "(120 rows x 63 features, CSR)" in text
    status, text, err = _run([path, "--libsvm", "--zero-based", "yes", "--n-features", "64",
                              "--model", "logistic", *SHORT], capsys)
    assert status == 0, err
    assert "(120 rows x 64 features, CSR)" in text
    status, _, err = _run([path, "--libsvm", "--zero-based", "yes", "--n-features", "10",
                           "--model", "logistic", *SHORT], capsys)
    assert status == 2 and "--n-features is smaller" in err


def test_the_report_gives_the_batch_used(tmp_path, capsys):
    """An exact-gradient fit reads every training row a step: the report says
    so (it printed "batch 100")."""
    X, y = _classification_rows(seed=6)
    path = _write_csv(tmp_path / "t.csv", X, y, ["a", "b", "c"])
    status, text, err = _run([path, "--target", "label", "--model", "logistic",
                              "--subsampling", "full", "--test-size", "0.25", *SHORT], capsys)
    assert status == 0, err
    assert "batch 180" in text


def test_the_words_about_outputs_and_the_network_trace_are_current():
    """``fit --help`` names both outputs (it said ".npz" only), and the CLI
    page gives the network's trace rows as the estimator has them (it said
    2,000 where the code keeps 1,000)."""
    from pathlib import Path

    from skbayes_sg.__main__ import build_parser
    from skbayes_sg.neural_network._mlp import DIAGNOSTIC_ROWS
    parser = build_parser()
    fit = parser._subparsers._group_actions[0].choices["fit"]
    assert ".nc" in fit.description and ".npz" in fit.description
    page = (Path(__file__).resolve().parents[1] / "doc" / "cli.rst").read_text()
    page = " ".join(page.split())
    assert f"(up to {DIAGNOSTIC_ROWS:,} of) the training rows" in page
