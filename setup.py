"""Builds the quota engine's hot modules as C extensions with mypyc (part of mypy).

Everything else is in pyproject.toml. The compiled modules are ordinary typed Python (checked by mypy
like the rest); compiling roughly halves the cost of recording into a quota sensor. Set
TELEMETRY_SINK_PURE_PYTHON=1 to skip compiling: the same modules then run as plain Python, with the
same behaviour. The Makefile lists the same files, so editing one rebuilds it.
"""

import os

from setuptools import setup

COMPILED = ["quotas/stats.py", "quotas/sensor.py"]
# (Compiling the managers too was measured slower: they mostly call into interpreted callbacks.)

if os.environ.get("TELEMETRY_SINK_PURE_PYTHON"):
    setup()
else:
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(COMPILED, opt_level="3"))
