"""geogateway's test suite.

The suite starts hundreds of Python processes (the CLI, drill workers, killed
consumers): where the environment says not to write bytecode
(``PYTHONDONTWRITEBYTECODE``), each of them would compile every module it imports
again, and each xdist worker would rewrite every test module's asserts again. Cached
bytecode is checked against its source, so the suite and its processes write it.
"""

import os
import sys

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
