"""The one build step pyproject.toml cannot declare stably: the compiled event core.

``sim._flowcore`` (``sim/_flowcore.c``, ``_flowshare.c``, ``_flowwhole.c``,
``_flowclass.c``, ``_flowclock.c``) is plain C with no dependency beyond the Python headers;
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

setup(
    ext_modules=[
        Extension(
            "sim._flowcore",
            sources=[
                "sim/_flowcore.c",
                "sim/_flowshare.c",
                "sim/_flowwhole.c",
                "sim/_flowclass.c",
                "sim/_flowclock.c",
            ],
            depends=["sim/_flowcore.h"],
            extra_compile_args=["-ffp-contract=off"],
            optional=True,
        )
    ]
)
