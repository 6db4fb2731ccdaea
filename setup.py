"""The one build step pyproject.toml cannot declare stably: the compiled event core.

``sim._flowcore`` (``sim/_flowcore.c`` and the units below it, :data:`CORE_UNITS`, in
layers: ``_flowcore.c`` comment) is plain C with no dependency beyond the Python headers;
``pip install -e .`` (``make bootstrap``) compiles it in place. It is
optional: without a C compiler the install still succeeds, ``make
bootstrap`` prints one line saying so (and ``make core`` retries),
:func:`sim.engine.simulate` runs the pure-Python reference core with the
same line on the ``sim`` logger (same results, slower), and
``tests/sim/test_compiled.py`` fails so that CI notices.
``-ffp-contract=off``: no fused multiply-add, or the doubles would stop
matching the Python reference bit for bit.
"""

from setuptools import Extension, setup

# The core's C units, top layer first; each but _flowcore has a header (sim/_flow*.h).
CORE_UNITS = ("_flowcore", "_flowshare", "_flowclass", "_flowwhole", "_flowclock", "_flowvec")

setup(
    ext_modules=[
        Extension(
            "sim._flowcore",
            sources=[f"sim/{unit}.c" for unit in CORE_UNITS],
            depends=[f"sim/{unit}.h" for unit in CORE_UNITS[1:]] + ["sim/_flownet.h"],
            extra_compile_args=["-ffp-contract=off"],
            optional=True,
        )
    ]
)
