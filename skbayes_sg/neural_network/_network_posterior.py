"""The network estimator's posterior: Bayesian model averages of its draws'
predictions, their log-likelihoods, the convergence trace and its
diagnostics, the ArviZ export (:class:`NetworkPosteriorMixin`)."""
import warnings

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._dask_rows import rowwise
from ..diagnostics._advice import RunReport
from .._sampling.samplers import BY_NAME as SAMPLER_MODULES
from ._backend import _import_torch_backend
from .._warn_location import user_stacklevel


def _validated_rows(estimator, X):
    """``X`` checked against the fitted estimator (features, finite values):
    dense rows as float32/64 arrays, sparse ones as CSR."""
    return validate_data(estimator, X, reset=False, accept_sparse="csr",
                         dtype=[np.float64, np.float32])


class NetworkPosteriorMixin:
    """Predictions and diagnostics of a fitted
    :class:`~._mlp.SGMCMCMLPClassifier`."""

    # ------------------------------------------------------------------
    # prediction
    # ------------------------------------------------------------------
    @rowwise
    def predict_log_proba(self, X):
        """Log of the Bayesian-model-average class probabilities.

        ``log((1/D) sum_d p(y | x, theta_d))`` over the ``D`` draws in
        ``coef_samples_`` (all chains), computed stably with log-sum-exp.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_rows, n_features)
            Input data.

        Returns
        -------
        ndarray of shape (n_rows, n_classes)
            Log-probabilities, columns in the order of ``classes_``.
        """
        check_is_fitted(self)
        X = _validated_rows(self, X)
        backend = _import_torch_backend()
        import torch

        net = backend.MLPNet(self.layer_sizes_, self.activation, self.n_outputs_ == 1)
        draws = np.ascontiguousarray(self.coef_samples_.reshape(-1, self.n_params_))
        return backend.bma_log_proba(
            net, draws, X, device=self._resolve_device(torch),
            dtype=backend.torch_dtype(self.dtype),
            max_draws=self.max_draws_in_memory,
        )

    def _draw_log_likelihood(self, X, y):
        """``sum_i log p(y_i | x_i, theta)`` of the rows ``(X, y)`` under each
        draw, shape ``(n_chains, n_kept)``: a scalar trace that, unlike the
        weights, has no permutation symmetry (the command line's convergence
        check). The labels must be in ``classes_``."""
        check_is_fitted(self)
        X = _validated_rows(self, X)
        y = np.asarray(y)
        if not np.all(np.isin(y, self.classes_)):
            raise ValueError("y contains labels not in classes_.")
        return self._rows_log_likelihood(X, np.searchsorted(self.classes_, y))

    def _rows_log_likelihood(self, X, y_idx):
        """:meth:`_draw_log_likelihood` of validated rows and class indices."""
        backend = _import_torch_backend()
        import torch

        net = backend.MLPNet(self.layer_sizes_, self.activation, self.n_outputs_ == 1)
        draws = np.ascontiguousarray(self.coef_samples_.reshape(-1, self.n_params_))
        ll = backend.draws_log_likelihood(
            net, draws, X, y_idx, device=self._resolve_device(torch),
            dtype=backend.torch_dtype(self.dtype), max_draws=self.max_draws_in_memory)
        return ll.reshape(self.coef_samples_.shape[:2])

    def _pointwise_log_proba(self, X):
        """Yield ``(draws slice, rows slice, log_proba)`` with ``log_proba``
        of shape (draws, rows, n_classes), float64: every draw's class
        log-probabilities, in the memory-bounded blocks of the prediction."""
        backend = _import_torch_backend()
        import torch

        net = backend.MLPNet(self.layer_sizes_, self.activation, self.n_outputs_ == 1)
        draws = np.ascontiguousarray(self.coef_samples_.reshape(-1, self.n_params_))
        device, dtype = self._resolve_device(torch), backend.torch_dtype(self.dtype)
        d_block, rows = backend.prediction_blocks(net, draws.shape[0],
                                                   self.max_draws_in_memory)
        with torch.no_grad():
            for r0 in range(0, X.shape[0], rows):
                Xt = backend.device_tensor(X[r0:r0 + rows], device, dtype)
                for d0 in range(0, draws.shape[0], d_block):
                    chunk = backend.device_tensor(draws[d0:d0 + d_block], device, dtype)
                    lp = net.draws_log_proba(chunk, Xt).double().cpu().numpy()
                    yield (slice(d0, d0 + lp.shape[0]), slice(r0, r0 + lp.shape[1]), lp)

    # ------------------------------------------------------------------
    # diagnostics
    # ------------------------------------------------------------------
    def convergence_quantities(self):
        """Permutation-invariant quantities of each draw, for convergence checks.

        The weights are identified only up to permutations (and, for odd
        activations, sign flips) of the hidden units: chains in equivalent
        modes disagree on them while predicting alike.  These quantities are
        the same in every such mode, so R-hat and ESS on them mean something
        (:meth:`summary`, the fit's warning).  Cached until the draws change.

        Returns
        -------
        values : ndarray of shape (n_chains, n_kept, n_layers_)
            The log-likelihood of ``min(n_samples, DIAGNOSTIC_ROWS)`` fixed
            training rows, then the Frobenius norm of each layer's weights.
        labels : list of str
        """
        check_is_fitted(self)
        cache = getattr(self, "_convergence_cache", None)
        if cache is not None and cache[0] is self.coef_samples_:
            return cache[1], cache[2]
        norms = _weight_norms(self.coef_samples_, self.layer_sizes_)
        draws = np.stack([self._rows_log_likelihood(*self._diagnostic_rows)] + norms, axis=-1)
        labels = ["log_likelihood"] + [f"weight_norm[{i + 1}]" for i in range(len(norms))]
        self._convergence_cache = (self.coef_samples_, draws, labels)
        return draws, labels

    def _warn_if_unreliable(self):
        """The fit's convergence warning (:func:`._network_validation.fit_messages`)."""
        from ..diagnostics._convergence import MCMCConvergenceWarning
        from ._network_validation import fit_messages

        messages = fit_messages(self)
        if messages:
            warnings.warn(" ".join(messages), MCMCConvergenceWarning, stacklevel=user_stacklevel())

    def __skbayes_sg_run__(self):
        """What the convergence advice reads of this fit's run: its mixing
        hint; no chain shares its start (each from its own Glorot draw, and
        with ``init="mode"`` at the mode Adam finds from it)."""
        return RunReport(mixing_hint=self._mixing_hint(), chains_share_a_start=False)

    def _mixing_hint(self):
        hints = [SAMPLER_MODULES[self.sampler].MIXING_HINT]
        if self.coef_samples_.shape[0] == 1:
            hints.append("More chains (n_chains=4) give R-hat independent runs to compare.")
        # measured on digits: the weight norms drift along weights the data
        # barely constrain, and a 10x warm-up that stops the drift leaves the
        # test log-loss where it was (doc/mlp.rst)
        hints.append("The weight norms can drift without moving the prediction: "
                     "skbayes_sg.diagnostics.model_average_error(clf, X_val, y_val) says how "
                     "much a longer run or more chains would change the held-out log-loss, "
                     "and validation_fraction=0.2 makes the fit's warning read that instead.")
        return " ".join(hint for hint in hints if hint)

    def summary(self, quantiles=(0.05, 0.5, 0.95), names=None):
        """Posterior summary of the network's permutation-invariant quantities.

        One row per quantity: ``log_likelihood``, the log-likelihood of up
        to ``DIAGNOSTIC_ROWS`` training rows (evenly spaced, fixed at
        ``fit``) under each draw, and ``weight_norm[l]``, the Frobenius norm
        of layer ``l``'s weight matrix. A table of the weights themselves
        would mislead: they are identified only up to permutations of the
        hidden units, so their R-hat is large whenever chains settle in
        equivalent modes. See :func:`skbayes_sg.diagnostics.summary`.

        Parameters
        ----------
        quantiles : sequence of float in [0, 1], default=(0.05, 0.5, 0.95)
            Posterior quantiles to report.
        names : sequence of str or None, default=None
            Row labels in place of the default ones (``n_layers_`` of them).

        Returns
        -------
        table : pandas.DataFrame or SummaryTable
            Columns ``mean``, ``sd``, the quantiles, ``ess_bulk``,
            ``ess_tail`` and ``r_hat``.
        """
        from ..diagnostics import summary
        return summary(self, quantiles=quantiles, names=names)

    def check_convergence(self, *, rhat_threshold=1.01, min_ess_per_chain=None):
        """Warn when the chains have not converged (R-hat) or mixed (ESS).

        The check of the warning at the end of :meth:`fit`, on the quantities
        of :meth:`summary`. See
        :func:`skbayes_sg.diagnostics.check_convergence`.

        Parameters
        ----------
        rhat_threshold : float, default=1.01
            Largest acceptable rank-normalised split R-hat.
        min_ess_per_chain : float or None, default=None
            Smallest acceptable bulk and tail ESS per chain (None: 100).

        Returns
        -------
        converged : bool
            True when every quantity passes both checks; otherwise an
            ``MCMCConvergenceWarning`` names what to change.
        """
        from ..diagnostics import check_convergence
        return check_convergence(self, rhat_threshold=rhat_threshold,
                                 min_ess_per_chain=min_ess_per_chain)

    def to_inference_data(self, X=None, y=None, *, posterior_predictive=None,
                          random_state=None):
        """The draws as an ``arviz.InferenceData`` (needs the ``arviz`` extra).

        Parameters
        ----------
        X, y : array-like or None, default=None
            Observations: with them the export holds ``log_likelihood`` (``y``,
            dims ``(chain, draw, obs)``, for ``az.loo`` and ``az.compare``),
            ``observed_data`` and the log posterior ``lp`` in
            ``sample_stats``.
        posterior_predictive : bool or None, default=None
            Draw a class at every row of ``X`` once per posterior draw
            (``posterior_predictive`` group, dims ``(chain, draw, obs)``;
            needs ``X``). None: True when ``X`` comes without ``y``.
        random_state : int, RandomState instance or None, default=None
            Seeds the posterior predictive draws.

        Returns
        -------
        idata : arviz.InferenceData (ArviZ 0.x) or xarray.DataTree (ArviZ 1.x)
            ``posterior`` holds, per layer ``l``, the weights ``W{l}`` (dims
            ``(chain, draw, layer{l}_in, layer{l}_out)``) and biases ``b{l}``
            (``(chain, draw, layer{l}_out)``), and the permutation-invariant
            quantities of :meth:`summary`: ``log_likelihood_rows`` and
            ``weight_norm`` (dims ``(chain, draw, layer)``). Check
            convergence on the latter (``az.summary(idata, var_names=
            ["log_likelihood_rows", "weight_norm"])``): the weights' R-hat
            is inflated by the hidden units' permutation symmetry.
        """
        from ..diagnostics._arviz import (_draw_stats, _from_dict, _import_arviz,
                                          _predictive_request)
        from .._version import __version__

        az = _import_arviz()
        check_is_fitted(self)
        posterior_predictive = _predictive_request(X, y, posterior_predictive)
        chains, n_draws = self.coef_samples_.shape[:2]
        posterior, dims, coords = self._export_posterior()
        attrs = {"inference_library": "skbayes_sg", "inference_library_version": __version__,
                 "estimator": type(self).__name__, "sampler": self.sampler,
                 "subsampling": self.subsampling, "step_size": self.step_size_,
                 "n_grad_evals": self.n_grad_evals_,
                 "diagnostic_rows": int(self._diagnostic_rows[0].shape[0])}
        sample_stats = _draw_stats(self, (chains, n_draws))
        groups = {}
        if X is not None:
            groups, lp, n_obs = self._export_observations(X, y, posterior_predictive,
                                                          random_state)
            dims["y"], coords["obs"] = ["obs"], np.arange(n_obs)
            if lp is not None:
                sample_stats["lp"] = lp
        return _from_dict(az, posterior, sample_stats, groups, coords, dims, attrs)

    def _export_posterior(self):
        """``(posterior, dims, coords)`` of :meth:`to_inference_data`: per
        layer ``l`` the weights ``W{l}`` and biases ``b{l}``, then the
        permutation-invariant quantities of :meth:`convergence_quantities`."""
        chains, n_draws = self.coef_samples_.shape[:2]
        posterior, dims, coords = {}, {}, {}
        pos = 0
        for layer, (fi, fo) in enumerate(zip(self.layer_sizes_[:-1], self.layer_sizes_[1:]),
                                         start=1):
            posterior[f"W{layer}"] = self.coef_samples_[:, :, pos:pos + fi * fo].reshape(
                chains, n_draws, fi, fo)
            posterior[f"b{layer}"] = self.coef_samples_[:, :, pos + fi * fo:pos + fi * fo + fo]
            dims[f"W{layer}"] = [f"layer{layer}_in", f"layer{layer}_out"]
            dims[f"b{layer}"] = [f"layer{layer}_out"]
            pos += fi * fo + fo
        names = getattr(self, "feature_names_in_", None)
        if names is not None:
            coords["layer1_in"] = [str(v) for v in names]
        invariant, _ = self.convergence_quantities()
        posterior["log_likelihood_rows"] = invariant[:, :, 0]
        posterior["weight_norm"] = invariant[:, :, 1:]
        dims["weight_norm"] = ["layer"]
        coords["layer"] = np.arange(1, self.n_layers_)
        return posterior, dims, coords

    def _export_observations(self, X, y, posterior_predictive, random_state):
        """``(groups, lp, n_obs)`` of :meth:`to_inference_data` at the rows
        ``X``: with ``y`` the ``log_likelihood`` and ``observed_data`` groups
        and ``lp``, the log posterior of every draw (else None); the
        ``posterior_predictive`` group when asked; and the number of rows."""
        chains, n_draws = self.coef_samples_.shape[:2]
        X = _validated_rows(self, X)
        y_idx = None
        if y is not None:
            y = np.asarray(y).ravel()
            if not np.all(np.isin(y, self.classes_)):
                raise ValueError("y contains labels not in classes_.")
            y_idx = np.searchsorted(self.classes_, y)
        loglik, pred = self._pointwise_export(X, y_idx, posterior_predictive, random_state)
        groups, lp = {}, None
        if loglik is not None:
            loglik = loglik.reshape(chains, n_draws, -1)
            groups["log_likelihood"] = {"y": loglik}
            groups["observed_data"] = {"y": y}
            theta = self.coef_samples_.astype(np.float64)
            lp = loglik.sum(axis=2) + self._log_prior(theta)
        if pred is not None:
            groups["posterior_predictive"] = {
                "y": self.classes_[pred].reshape(chains, n_draws, -1)}
        return groups, lp, X.shape[0]

    def log_likelihood(self, X, y):
        """Every draw's log-likelihood of every row, ``log p(y_i | x_i,
        theta_s)`` for labels ``y`` in ``classes_``: shape (n_samples,
        n_chains * n_kept), draws chain-major, as the linear estimators'
        (read by :func:`skbayes_sg.diagnostics.loo` and ``compare``)."""
        check_is_fitted(self)
        X = _validated_rows(self, X)
        return self._validated_log_likelihood(X, y).T

    def _validated_log_likelihood(self, X, y):
        """``log p(y_i | x_i, theta_s)`` of rows fit validated (no column
        names to check), shape (n_chains * n_kept, n_rows)."""
        y = np.asarray(y).ravel()
        if not np.all(np.isin(y, self.classes_)):
            raise ValueError("y contains labels not in classes_.")
        loglik, _ = self._pointwise_export(X, np.searchsorted(self.classes_, y), False, None)
        return loglik

    def _pointwise_export(self, X, y_idx, posterior_predictive, random_state):
        """``(loglik, pred)``, each of shape (n_chains * n_kept, n_rows) or
        None: every draw's log-likelihood of the class indices ``y_idx`` (None
        without them), and one class index drawn from every draw at every row
        (with ``posterior_predictive``)."""
        n_total = self.coef_samples_.shape[0] * self.coef_samples_.shape[1]
        loglik = None if y_idx is None else np.empty((n_total, X.shape[0]))
        pred = np.empty((n_total, X.shape[0]), dtype=np.int64) \
            if posterior_predictive else None
        rng = check_random_state(random_state)
        for d, r, lp in self._pointwise_log_proba(X):
            if loglik is not None:
                loglik[d, r] = np.take_along_axis(
                    lp, np.broadcast_to(y_idx[r][None, :, None], lp.shape[:2] + (1,)),
                    axis=2)[..., 0]
            if pred is not None:   # inverse-CDF draw of one class per draw and row
                cdf = np.cumsum(np.exp(lp), axis=2)
                u = rng.uniform(size=lp.shape[:2] + (1,)) * cdf[..., -1:]
                pred[d, r] = np.minimum((cdf < u).sum(axis=2), lp.shape[2] - 1)
        return loglik, pred

    @rowwise
    def predict_proba(self, X):
        """Bayesian-model-average class probabilities.

        The mean over all draws of ``softmax(f_theta(X))`` (logistic for two
        classes), evaluated in blocks of rows and draws.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_rows, n_features)
            Input data.

        Returns
        -------
        ndarray of shape (n_rows, n_classes)
            Probabilities, columns in the order of ``classes_``; rows sum
            to one.
        """
        return np.exp(self.predict_log_proba(X))

    @rowwise
    def predict(self, X):
        """Most probable class under the Bayesian model average.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_rows, n_features)
            Input data.

        Returns
        -------
        ndarray of shape (n_rows,)
            Predicted labels from ``classes_``.
        """
        log_proba = self.predict_log_proba(X)
        return self.classes_[np.argmax(log_proba, axis=1)]

    def unpack_params(self, theta):
        """Split a flat parameter vector into per-layer weights and biases.

        Parameters
        ----------
        theta : array-like of shape (n_params_,)
            For example ``coef_samples_[chain, draw]``.

        Returns
        -------
        coefs : list of ndarray
            Weight matrices, ``coefs[l]`` of shape
            ``(layer_sizes_[l], layer_sizes_[l + 1])`` (as
            ``MLPClassifier.coefs_``).
        intercepts : list of ndarray
            Biases, ``intercepts[l]`` of shape ``(layer_sizes_[l + 1],)``.
        """
        check_is_fitted(self)
        theta = np.asarray(theta)
        if theta.shape != (self.n_params_,):
            raise ValueError(
                f"theta must have shape ({self.n_params_},), got {theta.shape}."
            )
        coefs, intercepts, pos = [], [], 0
        for fi, fo in zip(self.layer_sizes_[:-1], self.layer_sizes_[1:]):
            coefs.append(theta[pos:pos + fi * fo].reshape(fi, fo))
            pos += fi * fo
            intercepts.append(theta[pos:pos + fo])
            pos += fo
        return coefs, intercepts


def _weight_norms(coef, layer_sizes):
    """The Frobenius norm of each layer's weight matrix (biases left out) in
    every draw of ``coef`` (n_chains, n_kept, n_params): a list of arrays."""
    norms, pos = [], 0
    for fan_in, fan_out in zip(layer_sizes[:-1], layer_sizes[1:]):
        W = coef[:, :, pos:pos + fan_in * fan_out].astype(np.float64)
        norms.append(np.sqrt(np.einsum("cdk,cdk->cd", W, W)))
        pos += fan_in * fan_out + fan_out
    return norms
