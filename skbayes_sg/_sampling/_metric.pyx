# cython: language_level=3
"""Metrics: ``theta = center + L z`` and gradients pulled back, ``g_z = s L^T g``.

Dense factors use BLAS ``dtrmv`` (scipy's Cython BLAS; no link-time
dependency).  A C-order upper-triangular ``L`` is, for Fortran BLAS, the
lower-triangular matrix ``F = L^T``: ``L z = F^T z`` and ``L^T g = F g``.
"""
import numpy as np
from scipy.linalg import solve_triangular

from libc.string cimport memcpy
from scipy.linalg.cython_blas cimport dgemv, dtrmv

METRIC_KINDS = {"identity": METRIC_IDENTITY, "diagonal": METRIC_DIAGONAL,
                "dense": METRIC_DENSE, "lowrank": METRIC_LOWRANK}
_KIND_NAMES = {v: k for k, v in METRIC_KINDS.items()}


cdef class Metric:
    """Affine map between the sampler's coordinates ``z`` and ``theta``.

    Parameters
    ----------
    dim : int
        Number of parameters.
    kind : {"identity", "diagonal", "dense", "lowrank"}
    center : ndarray of shape (dim,) or None
        ``theta`` at ``z = 0`` (the mode); zeros for the identity.
    factor : ndarray or None
        ``D`` (shape (dim,)) for a diagonal or low-rank metric, ``L`` (shape
        (dim, dim), upper-triangular, ``L L^T`` the metric's covariance) for a
        dense one.
    scale : float, default=1.0
        The oracle's gradients (and potentials) are multiplied by it: the
        whitened metrics sample ``exp(-U/T)`` as ``exp(-scale U)`` with
        ``scale = 1/T`` and dynamics run at temperature 1.
    reference_precision : float, default=0.0
        ``kappa``: the curvature of the Gaussian the metric was built from,
        in ``z`` (1 for a Laplace metric, 0 for the identity).  Dynamics
        integrate ``kappa z / 2 ||z||^2`` exactly and discretise only the
        remainder ``g_z - kappa z``.
    basis, basis_scale : ndarray of shape (k, dim) and (k,), optional
        A low-rank metric's directions ``U`` (orthonormal rows, in the
        diagonal metric's coordinates) and their scales ``s > 0``:
        ``theta = center + D (I + U^T (diag(s) - I) U) z``, a covariance
        ``D (I + U^T (diag(s^2) - I) U) D``.  The diagonal metric whitens each
        coordinate; the k directions correct the correlations it leaves
        (the extreme eigenvectors of the whitened Hessian, ``s`` their
        eigenvalues' inverse square roots).  A step costs O(dim k).
    """

    def __init__(self, Py_ssize_t dim, str kind="identity", center=None, factor=None,
                 double scale=1.0, double reference_precision=0.0, basis=None,
                 basis_scale=None):
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
        self.basis = np.zeros((1, 1))
        self.basis_shift = np.zeros(1)
        self.work = np.zeros(1)
        self.rank = 0
        if self.kind == METRIC_DIAGONAL or self.kind == METRIC_LOWRANK:
            D = np.array(factor, dtype=np.float64).reshape(-1)
            if D.shape != (dim,) or not np.all(D > 0):
                raise ValueError("a diagonal metric needs dim positive scales")
            self.diag = D
        if self.kind == METRIC_LOWRANK:
            U = np.ascontiguousarray(basis, dtype=np.float64)
            S = np.array(basis_scale, dtype=np.float64).reshape(-1)
            if U.ndim != 2 or U.shape[1] != dim or S.shape != (U.shape[0],) or U.shape[0] < 1:
                raise ValueError("a low-rank metric needs a (k, dim) basis and k scales")
            if not np.all(S > 0):
                raise ValueError("a low-rank metric's scales must be positive")
            self.basis = U
            self.basis_shift = S - 1.0
            self.rank = <int> U.shape[0]
            self.work = np.zeros(self.rank)
        elif self.kind == METRIC_DENSE:
            F = np.ascontiguousarray(np.triu(np.asarray(factor, dtype=np.float64)))
            if F.shape != (dim, dim) or not np.all(np.diag(F) > 0):
                raise ValueError("a dense metric needs an upper-triangular (dim, dim) "
                                 "factor with a positive diagonal")
            self.factor = F
        if self.kind != METRIC_IDENTITY and self.center.shape[0] != dim:
            raise ValueError("center must have dim values")

    cdef void _lowrank_apply(self, double* v) noexcept nogil:
        """``v <- (I + U^T (S - I) U) v`` in place (two BLAS dgemv, O(dim k)).
        The C-order (k, dim) U is, for Fortran BLAS, the (dim, k) ``U^T``."""
        cdef int n = <int> self.dim, k = self.rank, inc = 1
        cdef double one = 1.0, zero = 0.0
        cdef intp i
        dgemv(b"T", &n, &k, &one, &self.basis[0, 0], &n, v, &inc, &zero, &self.work[0], &inc)
        for i in range(k):
            self.work[i] *= self.basis_shift[i]
        dgemv(b"N", &n, &k, &one, &self.basis[0, 0], &n, &self.work[0], &inc, &one, v, &inc)

    cdef void to_theta(self, const double* z, double* theta) noexcept nogil:
        cdef intp j
        cdef int n = <int> self.dim, inc = 1
        if self.kind == METRIC_IDENTITY:
            memcpy(theta, z, self.dim * sizeof(double))
        elif self.kind == METRIC_DIAGONAL:
            for j in range(self.dim):
                theta[j] = self.center[j] + self.diag[j] * z[j]
        elif self.kind == METRIC_LOWRANK:
            memcpy(theta, z, self.dim * sizeof(double))
            self._lowrank_apply(theta)
            for j in range(self.dim):
                theta[j] = self.center[j] + self.diag[j] * theta[j]
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
        elif self.kind == METRIC_LOWRANK:
            for j in range(self.dim):
                g[j] *= self.diag[j] * self.scale
            self._lowrank_apply(g)
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
        if self.kind == METRIC_LOWRANK:
            return np.asarray(self.center) + self._py_lowrank(z, 1.0) * np.asarray(self.diag)
        return np.asarray(self.center) + z @ np.asarray(self.factor).T

    def _py_lowrank(self, v, double power):
        """``(I + U^T (S^power - I) U) v`` for rows v (numpy twin)."""
        U = np.asarray(self.basis)
        shift = (np.asarray(self.basis_shift) + 1.0) ** power - 1.0
        return v + ((v @ U.T) * shift) @ U

    def py_to_z(self, theta):
        """Inverse of :meth:`py_to_theta`."""
        theta = np.asarray(theta, dtype=np.float64)
        if self.kind == METRIC_IDENTITY:
            return theta.copy()
        d = theta - np.asarray(self.center)
        if self.kind == METRIC_DIAGONAL:
            return d / np.asarray(self.diag)
        if self.kind == METRIC_LOWRANK:
            return self._py_lowrank(d / np.asarray(self.diag), -1.0)
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
        if self.kind == METRIC_LOWRANK:
            L = np.asarray(self.diag)[:, None] * self._py_lowrank(np.eye(self.dim), 1.0)
            return L @ L.T
        F = np.asarray(self.factor)
        return F @ F.T

    def get_config(self):
        """Arrays and numbers that rebuild this metric (picklable)."""
        cfg = {"dim": int(self.dim), "kind": _KIND_NAMES[self.kind],
               "center": np.array(self.center) if self.kind != METRIC_IDENTITY else None,
               "factor": (np.array(self.diag) if self.kind in (METRIC_DIAGONAL, METRIC_LOWRANK)
                          else np.array(self.factor) if self.kind == METRIC_DENSE else None),
               "scale": float(self.scale),
               "reference_precision": float(self.reference_precision)}
        if self.kind == METRIC_LOWRANK:
            cfg["basis"] = np.array(self.basis)
            cfg["basis_scale"] = np.asarray(self.basis_shift) + 1.0
        return cfg

    @classmethod
    def from_config(cls, cfg):
        """Rebuild from :meth:`get_config` output."""
        return cls(cfg["dim"], cfg["kind"], cfg["center"], cfg["factor"], cfg["scale"],
                   cfg["reference_precision"], cfg.get("basis"), cfg.get("basis_scale"))

    def __reduce__(self):
        return (_metric_from_config, (self.get_config(),))


def _metric_from_config(cfg):
    return Metric.from_config(cfg)
