"""The estimator's side of ``fit`` on a dask array (:class:`DaskFitMixin`).

:mod:`._dask_fit` holds what runs on the cluster (the row blocks, the pool,
the Newton passes, the sums); the steps here read and write the estimator's
own state (its target encoding, its model and settings, the in-memory
sampling on the pool), so they are its methods, called on ``self``.  dask
is an optional dependency: this module imports it only inside a fit on a
dask array.
"""
import warnings
from dataclasses import replace

import numpy as np
from sklearn.base import is_classifier
from sklearn.utils import check_random_state

from ._parameters import parameters_set
from ._sampling._context import FitContext
from ._sampling._glm import GLM, NEGATIVE_BINOMIAL, model_spec
from ._sampling._row_algebra import MAX_DENSE_LAPLACE
from ._sampling._shape_search import estimate_shape, search_shape


class DaskFitMixin:
    """``fit`` on dask collections for the linear estimators (see
    :mod:`._dask_fit` for the method and its exactness)."""

    def _fit_on_dask(self, X, y, sample_weight):
        """``fit(X, y, sample_weight)`` on dask collections: the set-up as
        passes on the cluster, the sampling on a pool of rows drawn ahead."""
        # dask is an optional dependency; the pool's size is read at each fit
        from ._dask_fit import DASK_SUBSAMPLINGS, POOL_ROWS, DaskRows, population_mode
        self._refuse_on_dask(DASK_SUBSAMPLINGS)
        data = DaskRows(X, y, sample_weight)
        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        rng = np.random.default_rng(seed)
        with parameters_set(self, subsampling=DASK_SUBSAMPLINGS[self.subsampling],
                            access="cyclic", warm_start=False, random_state=seed):
            passes = self._encode_dask_targets(data) + self._settings_from_gram(data)
            size = POOL_ROWS
            pool = data.draw_pool(size, rng)
            shape_passes, theta_at_shape = self._shape_on_cluster(data, pool)
            alpha_passes, theta_at_alpha = self._alpha_on_cluster(data, pool)
            theta, ctx = self._pool_mode(*pool, data.n)
            theta = next((t for t in (theta_at_shape, theta_at_alpha) if t is not None), theta)
            glm, alpha = ctx.glm, float(ctx.alpha)
            del ctx               # its per-row caches: the client keeps the pool only
            population, newton = population_mode(
                data, glm, alpha, bool(self.fit_intercept), theta, float(self.temperature))
            passes += 1 + shape_passes + alpha_passes + newton
            read, size, spent, more = self._sample_pools(data, population, pool, rng)
        self._count_dask_work(data, passes + more, read, size, spent)
        return self

    def _sample_pools(self, data, population, pool, rng):
        """Sample on ``pool``; where a chain read more rows than it holds,
        draw a larger pool (a pass) and sample again, up to
        ``MAX_POOLS`` pools.  Returns ``(rows a chain read, the kept pool's
        size, row evaluations of the samplings given up, pool passes)``."""
        from ._dask_fit import MAX_POOLS, POOL_GROWTH
        size, spent, more = len(pool[1]), 0, 0
        for attempt in range(MAX_POOLS):
            if attempt:
                pool = data.draw_pool(size, rng)
                more += 1
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                read = self._sample_pool(data, population, pool)
            if read <= size:
                break
            spent += self.n_grad_evals_
            size = int(np.ceil(POOL_GROWTH * read))
        else:
            raise RuntimeError(
                f"The chains read {read:.0f} rows each, more than the {len(pool[1])} rows of "
                f"the last of {MAX_POOLS} pools drawn for them (a chain must not read "
                "a row twice). Bound the sampling with n_samples or max_passes, or fit on "
                "rows in memory.")
        for w in caught:          # the kept fit's warnings, under the caller's filters
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return read, len(pool[1]), spent, more

    def _refuse_on_dask(self, subsamplings):
        """Settings a fit on a dask array cannot honour, refused by name."""
        if self.warm_start and hasattr(self, "_chain_states"):
            raise ValueError("warm_start=True continues chains on in-memory data; a fit on a "
                             "dask array starts afresh. Set warm_start=False.")
        if self.subsampling not in subsamplings:
            raise ValueError(
                f"subsampling={self.subsampling!r} is not available on a dask array: the "
                "chains read a pool of rows drawn ahead, each row once, which keeps "
                f"{sorted(subsamplings)} exact (exact gradients would read every row at "
                "every step). Use subsampling='auto', or compute X into memory.")
        if getattr(self, "class_weight", None) is not None:
            raise ValueError("class_weight is not available on a dask array yet; pass the "
                             "weights as sample_weight (a dask array of one weight per row).")
        if getattr(self, "shape", None) == "auto" and isinstance(self.alpha, str):
            raise ValueError("alpha='auto' with shape='auto' is not available on a dask array "
                             "(in memory the two searches alternate). Pass a number for alpha "
                             "or for shape, or compute X into memory.")

    def _encode_dask_targets(self, data):
        """Check and encode the targets and weights on the cluster: a
        classifier's classes from every row (one pass; ``classes_`` set and
        checked by its own rules), then the class index per row; a
        regressor's targets checked block by block by its model's rules as
        each pass reads them; the weights checked as the in-memory fit
        checks them (the same pass).  Returns the passes made."""
        from ._dask_fit import check_blocks, class_index
        glm_name = None if is_classifier(self) else self._make_glm(None, None).name
        if glm_name is not None:
            data.y = data.y.map_blocks(model_spec(glm_name).validate_targets,
                                       dtype=np.float64)
        classes = check_blocks(data, find_classes=glm_name is None)
        if classes is not None:
            self._encode_targets(classes)
            data.y = data.y.map_blocks(class_index, self.classes_, dtype=np.float64)
        return int(classes is not None or data.w is not None)

    def _settings_from_gram(self, data):
        """Settings the model finds from its data's sufficient statistics
        (ridge's evidence): one pass summing the Gram matrix and the
        targets' moments, the numbers set as parameters for this fit.
        Returns the passes made."""
        resolve = getattr(self, "_hyperparameters_from_gram", None)
        if resolve is None or not any(isinstance(getattr(self, name), str) or
                                      getattr(self, name) is None
                                      for name in ("alpha", "noise_var")):
            return 0
        from ._dask_fit import gram_sums
        self.set_params(**resolve(*gram_sums(data, bool(self.fit_intercept))))
        return 1

    def _shape_on_cluster(self, data, pool):
        """The negative binomial's ``shape="auto"`` by passes on the cluster
        (:func:`~._sampling._shape_search.search_shape`, from the pool's
        shape), set as a parameter for this fit.  Returns ``(passes, the
        mode at the shape or None)``."""
        if getattr(self, "shape", None) != "auto":
            return 0, None
        from ._dask_fit import population_mode, shape_terms_on_cluster
        X, y, w = pool
        y = self._encode_targets(y)
        weights = np.full(len(y), data.n / len(y)) * (1.0 if w is None else w)
        alpha, fit_intercept = float(self.alpha), bool(self.fit_intercept)

        def at_shape(shape):
            return FitContext(X, y, GLM(NEGATIVE_BINOMIAL, 1, (shape,)), alpha, fit_intercept,
                              1, weights)

        shape, _ = estimate_shape(at_shape(1.0))
        passes = [0]

        def mode_at(shape, theta):
            start = at_shape(shape).mode() if theta is None else theta
            population, k = population_mode(
                data, GLM(NEGATIVE_BINOMIAL, 1, (shape,)), alpha, fit_intercept, start,
                float(self.temperature))
            passes[0] += k
            return population.mode

        def terms_at(theta, log_r):
            return shape_terms_on_cluster(data, theta, fit_intercept, log_r)

        shape, theta, k = search_shape(mode_at, terms_at, shape, None)
        self.set_params(shape=shape)
        return passes[0] + k, theta

    def _alpha_on_cluster(self, data, pool):
        """Logistic regression's ``alpha="auto"``: the Laplace evidence of
        every row, each trial alpha's mode and Hessian by Newton passes on
        the cluster (:func:`~._dask_fit.population_mode`, the first from the
        pool's mode at alpha = 1), maximised as in memory
        (``_alpha_from_modes``); set as a parameter for this fit.  Returns
        ``(passes, the mode at that alpha or None)``."""
        search = getattr(self, "_alpha_from_modes", None)
        if search is None or not isinstance(self.alpha, str):
            return 0, None
        from ._dask_fit import population_mode
        with parameters_set(self, alpha=1.0):
            start, ctx = self._pool_mode(*pool, data.n)
        glm, fit_intercept = ctx.glm, bool(self.fit_intercept)
        temperature = float(self.temperature)
        del ctx
        passes = [0]

        def mode_at(alpha, theta):
            population, k = population_mode(data, glm, alpha, fit_intercept, theta, temperature)
            passes[0] += k
            return population

        alpha, theta = search(mode_at, start)
        self.set_params(alpha=alpha)
        return passes[0], theta

    def _pool_mode(self, X, y, w, n):
        """The posterior mode of a pool weighted up to n rows (in memory):
        where the Newton passes on the cluster start.  Refuses more
        coefficients than a dense Hessian on the client allows."""
        y = y if is_classifier(self) else self._encode_targets(y)
        weights = np.full(len(y), n / len(y)) * (1.0 if w is None else w)
        ctx = FitContext(X, y, self._make_glm(X, y), float(self.alpha),
                         bool(self.fit_intercept), 1, weights)
        if ctx.dim > MAX_DENSE_LAPLACE:
            raise ValueError(f"{ctx.dim} coefficients: a fit on a dask array keeps a "
                             f"dense Hessian (up to {MAX_DENSE_LAPLACE}); compute X into "
                             "memory.")
        self._fit_context_hook(ctx)       # the model's settings (ridge's noise variance)
        self._few_rows = None             # a pool's rows are not the data's count
        return ctx.mode(), ctx

    def _sample_pool(self, data, population, pool):
        """Sample on ``pool`` (``(X, y, w)``), chain ``c`` reading from row
        ``c * size / n_chains``; returns the rows each chain read."""
        X, y, w = pool
        size = len(y)
        y = y if is_classifier(self) else self._encode_targets(y)
        self._validate_X_y(X, y, reset=True)
        weights = np.full(size, data.n / size) * (1.0 if w is None else w)
        self._fit_encoded(X, y, weights, False,
                          replace(population, chain_rows=size // self.n_chains))
        return (self.n_passes_ - self.n_setup_passes_) * size / self.n_chains

    def _count_dask_work(self, data, passes, read, size, spent):
        """The fit's data passes counted over the whole data (``spent``: row
        evaluations of samplings given up for a larger pool), and the
        columns' names of a DataFrame."""
        self.n_grad_evals_ = int(passes * data.n + self.n_grad_evals_ + spent)
        setup_rows = self.n_setup_passes_ * size
        self.n_passes_ = self.n_grad_evals_ / data.n
        self.n_setup_passes_ = passes + setup_rows / data.n
        self.n_cluster_passes_ = int(passes)
        self.n_sampling_rows_ = int(round(read * self.n_chains))
        self.pool_size_ = int(size)
        if data.feature_names is not None:
            self.feature_names_in_ = data.feature_names
