"""Sphinx configuration of the skbayes_sg documentation.

Build (from the repository root, after ``python setup.py build_ext --inplace``)::

    sphinx-build -W -b html doc doc/_build/html

Warnings are errors (``-W``): every page must stay warning-free.
"""
import importlib
import os
import re
import sys
from pathlib import Path

import matplotlib
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

DOC_DIR = Path(__file__).resolve().parent
REPO_ROOT = DOC_DIR.parent
# document the source tree (with its in-place built extensions), not some
# other installed copy
sys.path.insert(0, str(REPO_ROOT))

try:
    import skbayes_sg
except ImportError as exc:  # pragma: no cover - depends on the build state
    raise ImportError(
        "The documentation imports skbayes_sg from the repository; build its "
        "Cython engine first: 'python setup.py build_ext --inplace'."
    ) from exc

# -- project information ------------------------------------------------------
project = "skbayes_sg"
author = "The skbayes_sg developers"
copyright = "the skbayes_sg developers"
release = skbayes_sg.__version__
version = ".".join(release.split(".")[:2])

# -- general configuration ----------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]
templates_path = ["_templates"]
exclude_patterns = [
    "_build", "generated/*.examples", "Thumbs.db", ".DS_Store",
    # the gallery's sources: its header is rendered into auto_examples/index
    # by sphinx-gallery, not read as a page of its own
    "examples/GALLERY_HEADER.rst",
    # sphinx-gallery's project-wide timing page: written into the source root
    # at every build, where the ``*`` glob of index.rst's toctree would list it
    # (the gallery's own auto_examples/sg_execution_times has the same table)
    "sg_execution_times.rst",
]
root_doc = "index"
default_role = "literal"

# autosummary writes one stub page per public class into doc/generated/
# (gitignored, rebuilt at every build)
autosummary_generate = True
autosummary_generate_overwrite = True
autosummary_imported_members = False

autodoc_default_options = {
    "members": True,
    # BaseEstimator's get_params/set_params and the metadata-routing
    # ``set_*_request`` helpers are sklearn's, documented by sklearn
    "inherited-members": "BaseEstimator",
    "exclude-members": ",".join(
        f"set_{m}_request" for m in ("fit", "score", "predict", "partial_fit")
    ) + ",get_metadata_routing,set_output"
    # ClassifierMixin/RegressorMixin.score: sklearn's docstrings, whose :ref:
    # targets live in sklearn's documentation
    + ",score",
}
autodoc_typehints = "none"
autoclass_content = "class"

# numpydoc renders Parameters / Attributes / Returns; autodoc already lists
# the members, so numpydoc must not add its own (duplicate) member tables
numpydoc_show_class_members = False
numpydoc_show_inherited_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False  # needs intersphinx (no network at build time)

# -- example gallery ------------------------------------------------------------
# The scripts doc/examples/plot_*.py run at every build; their figures and
# printed output make the pages of doc/auto_examples/ (generated, gitignored).
# A failing example fails the build.
matplotlib.use("agg")

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    # run every plot_*.py (the default pattern also matches e.g. "plotting.py")
    "filename_pattern": re.escape(os.sep) + r"plot_\w+\.py$",
    "within_subsection_order": "FileNameSortKey",
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "binder": {},
    "jupyterlite": None,
    "download_all_examples": False,
    "show_memory": False,
    "show_signature": False,
    "remove_config_comments": True,
    "min_reported_time": 0,
    # run every example at every build, also those whose source did not change
    # (sphinx-gallery's md5 cache would keep output of older library code)
    "run_stale_examples": True,
    # all examples run, then any failure is reported as a build error
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
}

# -- HTML output --------------------------------------------------------------
html_theme = "alabaster"
html_static_path = []
html_title = f"skbayes_sg {release}"
html_theme_options = {
    "description": "Bayesian scikit-learn estimators sampled by SG-MCMC",
    "fixed_sidebar": True,
}


# -- optional parts -------------------------------------------------------------
class IfImportable(SphinxDirective):
    """Parse the content only when the module given as argument imports.

    Optional parts of the library (e.g. the torch-backed
    ``skbayes_sg.neural_network``) may be absent or unimportable in a given
    build; their autodoc directives would then be warnings, i.e. errors under
    ``-W``.  When the import fails, a short note replaces the content.

    Usage::

        .. if-importable:: skbayes_sg.neural_network

           .. autoclass:: skbayes_sg.neural_network.SGMCMCMLPClassifier
    """

    required_arguments = 1
    has_content = True

    def run(self):
        module = self.arguments[0]
        try:
            importlib.import_module(module)
        except Exception as exc:  # any failure: the part is not available
            para = nodes.paragraph(
                text=f"{module} is not importable in this build of the documentation "
                     f"({type(exc).__name__}: {exc}); its reference is omitted.")
            return [nodes.note("", para)]
        container = nodes.container()
        self.state.nested_parse(self.content, self.content_offset, container)
        return container.children


# A fitted attribute named inside a numpydoc type, e.g. "ndarray of shape
# (n_features_in_,)", is an RST reference ("name_") to a missing target: an
# error under -W.  scikit-learn's convention is to quote it
# ("(`n_features_in_`,)"); this hook applies that convention to the
# "name : type" lines of docstrings that do not.
_FIELD_LINE = re.compile(r"^(\s*[*\w, ]+ : )(.*)$")
_TRAILING_UNDERSCORE = re.compile(r"(?<![`\w])([A-Za-z]\w*_)(?![`\w])")


def _quote_attribute_names_in_types(app, what, name, obj, options, lines):
    for k, line in enumerate(lines):
        match = _FIELD_LINE.match(line)
        if match:
            head, spec = match.groups()
            lines[k] = head + _TRAILING_UNDERSCORE.sub(r"``\1``", spec)


def setup(app):
    app.add_directive("if-importable", IfImportable)
    # before numpydoc (priority 500) turns the sections into RST
    app.connect("autodoc-process-docstring", _quote_attribute_names_in_types, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
