"""The network estimator's settings: the checks that refuse a parameter
that cannot act, the prior's layers and scales, and the automatic step,
friction, device and chain seeds (:class:`NetworkSettingsMixin`)."""
import math
from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import InvalidParameterError

from .._sampling._specs import (DYNAMICS, ESTIMATORS, NETWORK, NETWORK_METROPOLIS,
                                estimators_for, ineffective_settings, sampler_owners)
from .._sampling.samplers import BY_NAME as SAMPLER_MODULES

# friction="auto": the momentum decay h * gamma per step of the underdamped
# dynamics (the momentum-SGD analogue of momentum 0.9; for SGNHT, h A).
# step_size="auto" is each spec's ``network_learning_rate``.
_AUTO_MOMENTUM_DECAY = 0.1


def _same(a, b):
    """Whether a parameter value equals a default (numbers, sequences, None)."""
    if a is None or b is None:
        return a is b
    try:
        return bool(np.array_equal(np.asarray(a, dtype=np.float64),
                                   np.asarray(b, dtype=np.float64)))
    except (TypeError, ValueError):
        return a == b


class NetworkSettingsMixin:
    """The parameter checks and automatic settings of
    :class:`~._mlp.SGMCMCMLPClassifier` (they read its parameters)."""

    # ------------------------------------------------------------------
    # validation helpers
    # ------------------------------------------------------------------
    def _check_params(self):
        """Validate the parameters (constraints plus the explained refusals)."""
        sub = self.subsampling
        refusal = ESTIMATORS[sub].network_refusal if isinstance(sub, str) \
            and sub in ESTIMATORS else None
        if refusal:
            raise InvalidParameterError(
                f"subsampling={sub!r} is not available for SGMCMCMLPClassifier: "
                f"{refusal}. "
                f"Use one of {', '.join(repr(n) for n in estimators_for(NETWORK))}."
            )
        self._validate_params()
        self._check_parameters_act()
        self._check_prior_and_schedule()
        hidden = self.hidden_layer_sizes
        if isinstance(hidden, Integral):
            hidden = [hidden]
        hidden = list(hidden)
        if not all(isinstance(h, Integral) and not isinstance(h, bool) and h > 0
                   for h in hidden):
            raise InvalidParameterError(
                "hidden_layer_sizes must contain only positive integers, got "
                f"{self.hidden_layer_sizes!r}."
            )
        return tuple(int(h) for h in hidden)

    def _check_prior_and_schedule(self):
        """The prior and schedule settings must act: refuse those that the
        chosen ``prior`` / ``schedule`` would ignore, naming the fix."""
        defaults = type(self)().get_params(deep=False)
        if self.prior == "isotropic":
            for name in ("prior_scale", "prior_bias_scale", "hyperprior"):
                if not _same(getattr(self, name), defaults[name]):
                    raise InvalidParameterError(
                        f"{name}={getattr(self, name)!r} applies to prior='fan_in'; with "
                        f"prior='isotropic' every weight and bias is N(0, 1/alpha). Set "
                        f"prior='fan_in', or leave {name} at its default "
                        f"({defaults[name]!r}).")
        elif not _same(self.alpha, defaults["alpha"]):
            raise InvalidParameterError(
                f"alpha={self.alpha!r} sets the isotropic prior N(0, 1/alpha), which is "
                f"not the prior in use (prior={self.prior!r}, weights N(0, "
                "prior_scale**2 / fan_in)). Pass prior='isotropic' to use alpha, or set "
                "prior_scale instead.")
        if self.hyperprior is not None:
            hp = self.hyperprior
            ok = (isinstance(hp, (tuple, list)) and len(hp) == 2
                  and all(isinstance(v, Real) and not isinstance(v, bool)
                          and np.isfinite(v) and v > 0 for v in hp))
            if not ok:
                raise InvalidParameterError(
                    "hyperprior must be None or a pair (shape, rate) of positive finite "
                    f"numbers (a Gamma prior on each layer's precision), got {hp!r}; e.g. "
                    "hyperprior=(1.0, 1.0).")
        if self.schedule != "cyclical":
            for name in ("n_cycles", "exploration_fraction"):
                if not _same(getattr(self, name), defaults[name]):
                    raise InvalidParameterError(
                        f"{name}={getattr(self, name)!r} applies to schedule='cyclical', "
                        f"not schedule={self.schedule!r}; set schedule='cyclical' or leave "
                        f"{name} at its default ({defaults[name]!r}).")
        elif self.n_cycles > self.n_samples:
            raise InvalidParameterError(
                f"schedule='cyclical' keeps at least one draw per cycle, so n_cycles "
                f"({self.n_cycles}) must not exceed n_samples ({self.n_samples}); lower "
                "n_cycles or raise n_samples.")
        if self.schedule != "polynomial" and not _same(self.power_t, defaults["power_t"]):
            raise InvalidParameterError(
                f"power_t={self.power_t!r} applies to schedule='polynomial', not "
                f"schedule={self.schedule!r}; set schedule='polynomial' or leave power_t "
                f"at its default ({defaults['power_t']!r}).")

    def _model(self):
        """``(temperature, prior_scale)`` a run samples at: the parameters,
        where ``temperature`` is a number; with ``"auto"`` (which ``fit``
        resolves by fitting candidates at numbers) ``partial_fit`` samples
        the previous fit's model, or the posterior (``temperature=1``) on
        its first call."""
        if isinstance(self.temperature, str):
            if hasattr(self, "temperature_"):
                return self.temperature_, self.prior_scale_
            return 1.0, self.prior_scale
        return float(self.temperature), self.prior_scale

    def _prior_layers(self, layer_sizes):
        """``[(weight scale s, bias scale s_b)]`` per layer for the fan-in
        prior (weights ``N(0, s^2 / fan_in)``, biases ``N(0, s_b^2)``), or None
        for the isotropic prior."""
        if self.prior == "isotropic":
            return None
        return [(s, float(self.prior_bias_scale))
                for s in self._layer_scales(len(layer_sizes) - 1, self._model()[1])]

    def _layer_scales(self, n_layers, prior_scale=None):
        """``prior_scale`` (or the given one) as one weight scale per layer
        (checked)."""
        prior_scale = self.prior_scale if prior_scale is None else prior_scale
        scales = np.atleast_1d(np.asarray(prior_scale, dtype=np.float64)).ravel()
        if scales.size == 1:
            scales = np.repeat(scales, n_layers)
        if (scales.size != n_layers or not np.all(np.isfinite(scales))
                or not np.all(scales > 0)):
            raise ValueError(
                f"prior_scale must be a positive number or one positive number per layer "
                f"({n_layers} here: len(hidden_layer_sizes) + 1), got {prior_scale!r}.")
        return [float(v) for v in scales]

    def _log_prior(self, theta):
        """Log prior density of draws ``theta`` (shape (..., n_params_)), up
        to a constant; with a hyperprior, the marginal over the layers'
        precisions (a multivariate Student t per layer)."""
        theta = np.asarray(theta, dtype=np.float64)
        if self.prior == "isotropic":
            return -0.5 * float(self.alpha) * np.einsum("...k,...k->...", theta, theta)
        sb = float(self.prior_bias_scale)
        out = np.zeros(theta.shape[:-1])
        pos = 0
        # the fitted model's scale (temperature="auto" may have widened it)
        scale = getattr(self, "prior_scale_", self.prior_scale)   # fits pickled before it
        for s, fi, fo in zip(self._layer_scales(self.n_layers_ - 1, scale),
                             self.layer_sizes_[:-1],
                             self.layer_sizes_[1:]):
            W = theta[..., pos:pos + fi * fo]
            b = theta[..., pos + fi * fo:pos + fi * fo + fo]
            ssw = np.einsum("...k,...k->...", W, W) * fi / (s * s)
            if self.hyperprior is None:
                out -= 0.5 * ssw
            else:
                a, rate = self.hyperprior
                out -= (a + 0.5 * fi * fo) * np.log(rate + 0.5 * ssw)
            out -= 0.5 * np.einsum("...k,...k->...", b, b) / (sb * sb)
            pos += fi * fo + fo
        return out

    def _check_parameters_act(self):
        """A sampler hyperparameter set away from its default must act on the
        fit, or the fit is refused (a setting silently ignored is a wrong
        answer given quietly); the owners are the specs'."""
        problems = ineffective_settings(sampler_owners(), self, "sampler", self.sampler)
        if problems:
            raise InvalidParameterError(
                "; ".join(problems) + ". Leave the parameter at its default, or choose "
                "a sampler it applies to.")

    def _resolve_device(self, torch):
        """Map the ``device`` parameter to a torch device string."""
        dev = self.device
        if dev == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if dev == "cpu":
            return "cpu"
        if dev == "cuda" or dev.startswith("cuda:"):
            if not torch.cuda.is_available():
                raise ValueError(
                    f"device={dev!r} was requested but torch.cuda.is_available() is "
                    "False (no GPU or a CPU-only torch build); use device='cpu' or "
                    "device='auto'."
                )
            return dev
        raise ValueError(
            f"device must be 'cpu', 'cuda', 'cuda:<index>' or 'auto', got {dev!r}."
        )

    def _resolved_step(self, n_data):
        """``(step_size, friction)`` for data of ``n_data`` rows, or total
        weight ``n_data`` with row weights ("auto" resolved)."""
        if self.step_size == "auto":
            lr = DYNAMICS[self.sampler].network_learning_rate
            # a second-order dynamics moves theta by ~h^2 g: lr is its h^2 n
            h = (math.sqrt(lr / n_data) if DYNAMICS[self.sampler].second_order
                 else lr / n_data)
        else:
            h = float(self.step_size)
        gamma = _AUTO_MOMENTUM_DECAY / h if self.friction == "auto" else float(self.friction)
        return h, gamma

    def _resolve_metropolis(self, batch_size, n_rows):
        """``metropolis="auto"``: on with exact gradients (a minibatch of
        every row, uniform subsampling) and a dynamics with a Metropolis
        step; ``True`` where it cannot act is refused."""
        exact = batch_size >= n_rows and self.subsampling == "uniform"
        able = self.sampler in NETWORK_METROPOLIS
        if self.metropolis == "auto":
            return exact and able
        if self.metropolis and not (exact and able):
            raise ValueError(
                f"metropolis=True needs exact gradients (subsampling='uniform' with a "
                f"minibatch of every row, batch_size >= n_rows) and "
                f"sampler in {list(NETWORK_METROPOLIS)}; got sampler={self.sampler!r}, "
                f"subsampling={self.subsampling!r}, batch_size={self.batch_size!r} for "
                f"{n_rows} rows. Use metropolis='auto' (on wherever it can act), or "
                f"batch_size='auto' on up to 200 rows.")
        return bool(self.metropolis)

    def _sampler_params(self, batch_size, n_data, n_rows=None):
        h, gamma = self._resolved_step(n_data)
        n_rows = int(round(n_data)) if n_rows is None else int(n_rows)
        metropolis = self._resolve_metropolis(int(batch_size), n_rows)
        return {
            "sampler": self.sampler,
            "subsampling": self.subsampling,
            "step_size": h,
            "batch_size": int(batch_size),
            # the fan-in prior's precisions are a vector the runner adds to
            # every estimate; the dynamics' exact scalar term is then 0
            "alpha": float(self.alpha) if self.prior == "isotropic" else 0.0,
            "hyperprior": (None if self.hyperprior is None
                           else tuple(float(v) for v in self.hyperprior)),
            "temperature": self._model()[0],
            "friction": gamma,
            "inv_mass": float(self.inv_mass),
            "n_leapfrog": self.n_leapfrog,  # "auto" resolved by the runner
            "ewsg_chain_length": int(self.ewsg_chain_length),
            "snapshot_period": self.snapshot_period,
            "init": self.init,
            "map_epochs": int(self.map_epochs),
            "map_learning_rate": float(self.map_learning_rate),
            "verbose": int(bool(self.verbose)),
            "metropolis": metropolis,
            # dual averaging's target: the sampler file's Metropolis rule
            "target_accept": (SAMPLER_MODULES[self.sampler].METROPOLIS.target_accept
                              if metropolis else None),
            "adapt_step": self.step_size == "auto",
        }

    def _chain_seeds(self):
        """One 63-bit torch seed per chain from ``random_state``."""
        rng = check_random_state(self.random_state)
        entropy = rng.randint(0, 2**32, size=4, dtype=np.uint64).tolist()
        children = np.random.SeedSequence(entropy).spawn(int(self.n_chains))
        return [int(c.generate_state(1, dtype=np.uint64)[0]) & ((1 << 63) - 1)
                for c in children]
