# cython: language_level=3
"""Metrics: ``theta = center + L z`` and gradients pulled back, ``g_z = s L^T g``.

Dense factors use BLAS ``dtrmv`` (scipy's Cython BLAS; no link-time
dependency).  A C-order upper-triangular ``L`` is, for Fortran BLAS, the
lower-triangular matrix ``F = L^T``: ``L z = F^T z`` and ``L^T g = F g``.
"""
import numpy as np
from scipy.linalg import solve_triangular

from libc.string cimport memcpy
from scipy.linalg.cython_blas cimport dtrmv

METRIC_KINDS = {"identity": METRIC_IDENTITY, "diagonal": METRIC_DIAGONAL,
                "dense": METRIC_DENSE}
_KIND_NAMES = {v: k for k, v in METRIC_KINDS.items()}


cdef class Metric:
    """Affine map between the sampler's coordinates ``z`` and ``theta``.

    Parameters
    ----------
    dim : int
        Number of parameters.
    kind : {"identity", "diagonal", "dense"}
    center : ndarray of shape (dim,) or None
        ``theta`` at ``z = 0`` (the mode); zeros for the identity.
    factor : ndarray or None
        ``D`` (shape (dim,)) for a diagonal metric, ``L`` (shape (dim, dim),
        upper-triangular, ``L L^T`` the metric's covariance) for a dense one.
    scale : float, default=1.0
        The oracle's gradients (and potentials) are multiplied by it: the
        whitened metrics sample ``exp(-U/T)`` as ``exp(-scale U)`` with
        ``scale = 1/T`` and dynamics run at temperature 1.
    reference_precision : float, default=0.0
        ``kappa``: the curvature of the Gaussian the metric was built from,
        in ``z`` (1 for a Laplace metric, 0 for the identity).  Dynamics
        integrate ``kappa z / 2 ||z||^2`` exactly and discretise only the
        remainder ``g_z - kappa z``.
    """

    def __init__(self, Py_ssize_t dim, str kind="identity", center=None, factor=None,
                 double scale=1.0, double reference_precision=0.0):
        if kind not in METRIC_KINDS:
            raise ValueError("unknown metric kind %r" % kind)
        self.dim = dim
        self.kind = METRIC_KINDS[kind]
        self.scale = scale
        self.reference_precision = reference_precision
        self.center = (np.zeros(max(dim, 1)) if center is None
                       else np.array(center, dtype=np.float64).reshape(-1))
        self.diag = np.ones(1)
        self.factor = np.zeros((1, 1))
        if self.kind == METRIC_DIAGONAL:
            D = np.array(factor, dtype=np.float64).reshape(-1)
            if D.shape != (dim,) or not np.all(D > 0):
                raise ValueError("a diagonal metric needs dim positive scales")
            self.diag = D
        elif self.kind == METRIC_DENSE:
            F = np.ascontiguousarray(np.triu(np.asarray(factor, dtype=np.float64)))
            if F.shape != (dim, dim) or not np.all(np.diag(F) > 0):
                raise ValueError("a dense metric needs an upper-triangular (dim, dim) "
                                 "factor with a positive diagonal")
            self.factor = F
        if self.kind != METRIC_IDENTITY and self.center.shape[0] != dim:
            raise ValueError("center must have dim values")

    cdef void to_theta(self, const double* z, double* theta) noexcept nogil:
        cdef intp j
        cdef int n = <int> self.dim, inc = 1
        if self.kind == METRIC_IDENTITY:
            memcpy(theta, z, self.dim * sizeof(double))
        elif self.kind == METRIC_DIAGONAL:
            for j in range(self.dim):
                theta[j] = self.center[j] + self.diag[j] * z[j]
        else:
            memcpy(theta, z, self.dim * sizeof(double))
            dtrmv(b"L", b"T", b"N", &n, &self.factor[0, 0], &n, theta, &inc)
            for j in range(self.dim):
                theta[j] += self.center[j]

    cdef void grad_to_z(self, double* g) noexcept nogil:
        cdef intp j
        cdef int n = <int> self.dim, inc = 1
        if self.kind == METRIC_DIAGONAL:
            for j in range(self.dim):
                g[j] *= self.diag[j] * self.scale
        elif self.kind == METRIC_DENSE:
            dtrmv(b"L", b"N", b"N", &n, &self.factor[0, 0], &n, g, &inc)
            if self.scale != 1.0:
                for j in range(self.dim):
                    g[j] *= self.scale
        elif self.scale != 1.0:
            for j in range(self.dim):
                g[j] *= self.scale

    # ------------------------------------------------------------ python side
    @property
    def kind(self):
        return _KIND_NAMES[self.kind]

    @property
    def scale(self):
        return self.scale

    @property
    def reference_precision(self):
        return self.reference_precision

    @property
    def whitened(self):
        """Whether the metric carries a reference Gaussian (not the identity)."""
        return self.kind != METRIC_IDENTITY

    def py_to_theta(self, z):
        """``theta = center + L z`` for one point (dim,) or rows (m, dim)."""
        z = np.asarray(z, dtype=np.float64)
        if self.kind == METRIC_IDENTITY:
            return z.copy()
        if self.kind == METRIC_DIAGONAL:
            return np.asarray(self.center) + z * np.asarray(self.diag)
        return np.asarray(self.center) + z @ np.asarray(self.factor).T

    def py_to_z(self, theta):
        """Inverse of :meth:`py_to_theta`."""
        theta = np.asarray(theta, dtype=np.float64)
        if self.kind == METRIC_IDENTITY:
            return theta.copy()
        d = theta - np.asarray(self.center)
        if self.kind == METRIC_DIAGONAL:
            return d / np.asarray(self.diag)
        return solve_triangular(np.asarray(self.factor), d.T, lower=False).T

    def py_grad_to_z(self, g):
        """``scale L^T g`` (testing twin of the nogil kernel)."""
        cdef double[::1] out = np.array(g, dtype=np.float64)
        if out.shape[0] != self.dim:
            raise ValueError("g must have dim values")
        self.grad_to_z(&out[0])
        return np.asarray(out)

    def py_to_theta_kernel(self, z):
        """``to_theta`` through the nogil kernel (testing twin)."""
        cdef double[::1] zv = np.array(z, dtype=np.float64)
        out = np.empty(self.dim)
        cdef double[::1] ov = out
        self.to_theta(&zv[0], &ov[0])
        return out

    def covariance(self):
        """The metric's covariance ``L L^T`` in theta (``T`` times the Laplace
        covariance for a whitened metric)."""
        if self.kind == METRIC_IDENTITY:
            return np.eye(self.dim)
        if self.kind == METRIC_DIAGONAL:
            return np.diag(np.asarray(self.diag) ** 2)
        F = np.asarray(self.factor)
        return F @ F.T

    def get_config(self):
        """Arrays and numbers that rebuild this metric (picklable)."""
        return {"dim": int(self.dim), "kind": _KIND_NAMES[self.kind],
                "center": np.array(self.center) if self.kind != METRIC_IDENTITY else None,
                "factor": (np.array(self.diag) if self.kind == METRIC_DIAGONAL else
                           np.array(self.factor) if self.kind == METRIC_DENSE else None),
                "scale": float(self.scale),
                "reference_precision": float(self.reference_precision)}

    @classmethod
    def from_config(cls, cfg):
        """Rebuild from :meth:`get_config` output."""
        return cls(cfg["dim"], cfg["kind"], cfg["center"], cfg["factor"], cfg["scale"],
                   cfg["reference_precision"])

    def __reduce__(self):
        return (_metric_from_config, (self.get_config(),))


def _metric_from_config(cfg):
    return Metric.from_config(cfg)
