"""Where the package's warnings point: the first frame outside skbayes_sg,
as pandas' ``find_stack_level`` does, so that a warning shows the user's
``fit`` line (or the library's that called it: a ``Pipeline``, a
``GridSearchCV``) and not a line of the package that the path to it went
through, whatever that path (``fit``, a warm start, a dask array, a
``temperature="auto"`` candidate, a diagnostic called by the user)."""
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel():
    """The ``stacklevel`` that, passed to :func:`warnings.warn` by the caller
    of this function, attributes the warning to the first frame outside the
    package (1: the caller itself, should it be outside)."""
    frame = sys._getframe(1)              # the function that warns
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level
