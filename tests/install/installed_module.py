"""install.package: the installed Python module, imported from the moved install with no
HALCYON_LIBRARY or LD_LIBRARY_PATH, opens its own install's library and runs an operator.
    python3 installed_module.py <prefix> <libdir of the moved install>"""
import os
import sys

import numpy as np

prefix, libdir = (os.path.realpath(p) for p in sys.argv[1:3])
for var in ("HALCYON_LIBRARY", "LD_LIBRARY_PATH"):
    if var in os.environ:
        sys.exit(f"{var} is set: the module must find the library by itself")

import halcyon  # noqa: E402  (from PYTHONPATH = the moved install's python folder)

module = os.path.realpath(halcyon.__file__)
if not module.startswith(prefix + os.sep):
    sys.exit(f"imported {module}, not the module of the install at {prefix}")
lib = halcyon.load()
opened = os.path.realpath(lib._name)
if os.path.dirname(opened) != libdir:
    sys.exit(f"the module opened {lib._name}, not the library in {libdir}")
a = np.arange(37, dtype=np.float32)
b = np.full(37, 0.5, dtype=np.float32)
c = np.zeros(37, dtype=np.float32)
halcyon.run("vector_add", a=a, b=b, c=c)
if not np.array_equal(c, a + b):
    sys.exit(f"vector_add from the installed module: {c} != a + b")
print(f"installed module {module} opened {opened}; vector_add checked")
