"""Sample-quality diagnostics for posterior draws."""
from ._ksd import ksd, ksd_from_estimator

__all__ = ["ksd", "ksd_from_estimator"]
