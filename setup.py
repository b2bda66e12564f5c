"""Build the Cython engine of skbayes_sg.

Every ``X.tp`` under ``skbayes_sg/`` is first rendered into ``X`` by Cython's
Tempita (the float32 and float64 kernels written once; the rendered files are
not committed).  Every ``.pyx`` under ``skbayes_sg/`` becomes one extension
module.  The modules that draw random numbers link numpy's ``npyrandom`` and
``npymath`` static libraries (without them the import fails with an
undefined symbol).
"""
import os
from pathlib import Path

import numpy as np
from Cython import Tempita
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent
NUMPY_DIR = Path(np.get_include()).parent.parent  # .../numpy
NUMPY_LIB_DIRS = [
    str(NUMPY_DIR / "random" / "lib"),
    str(NUMPY_DIR / "_core" / "lib"),
    str(NUMPY_DIR / "core" / "lib"),  # numpy < 2
]


# the vectorised normal generator needs sqrt without errno handling to vectorise
EXTRA_COMPILE_ARGS = {
    "skbayes_sg._sampling._normal_stream": ["-fno-math-errno"],
    "skbayes_sg._sampling._flat_dynamics": ["-fno-math-errno"],
    "skbayes_sg._sampling._lazy": ["-fno-math-errno"],
}


def render_templates():
    """``X.tp`` -> ``X`` (rewritten only when the rendering changed, so that
    an unchanged template does not trigger a rebuild)."""
    for template in sorted((HERE / "skbayes_sg").rglob("*.tp")):
        target = template.with_suffix("")
        text = Tempita.sub(template.read_text(), name=str(template))
        if not target.exists() or target.read_text() != text:
            target.write_text(text)


def make_extensions():
    extensions = []
    for pyx in sorted((HERE / "skbayes_sg").rglob("*.pyx")):
        rel = pyx.relative_to(HERE)
        name = ".".join(rel.with_suffix("").parts)
        extensions.append(
            Extension(
                name,
                [str(rel)],
                include_dirs=[np.get_include()],
                library_dirs=[d for d in NUMPY_LIB_DIRS if os.path.isdir(d)],
                libraries=["npyrandom", "npymath", "m"],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=["-O3", *EXTRA_COMPILE_ARGS.get(name, [])],
            )
        )
    return extensions


class ParallelBuildExt(build_ext):
    """``build_ext`` compiling the extensions on every core (``-j``) unless
    told otherwise: the engine's C files take minutes each on one."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1


render_templates()
setup(
    cmdclass={"build_ext": ParallelBuildExt},
    ext_modules=cythonize(
        make_extensions(),
        nthreads=os.cpu_count() or 1,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
            "embedsignature": True,
        },
    ),
    package_data={"skbayes_sg": ["**/*.pxd", "**/*.h", "**/*.tp"]},
)
