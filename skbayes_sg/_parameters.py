"""An estimator's parameters set for a block of its own work and restored
after it: the fit on a dask array samples under the pool's settings, and
``temperature="auto"`` continues the chosen model's chains under its
settings, while ``get_params`` afterwards returns what the user set."""
from contextlib import contextmanager


@contextmanager
def parameters_set(estimator, **values):
    """``estimator`` with ``values`` as its parameters inside the block, and
    every parameter as it was before it afterwards (after an exception or
    Ctrl-C too), including any the block itself set (a model's ``"auto"``
    setting resolved to a number for the fit)."""
    saved = estimator.get_params(deep=False)
    estimator.set_params(**values)
    try:
        yield estimator
    finally:
        estimator.set_params(**saved)
