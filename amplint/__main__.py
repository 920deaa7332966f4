"""`python -m amplint`: the same command as `amplint`.

`python -m` puts the current directory first on sys.path, so a `libcst.py` or `tomli/` in
the project being linted would be imported instead of the real one. amplint's own package is
already imported when this runs; the directory is dropped before anything else is (as pip's
__main__ does). The `amplint` command never has the problem, and the README recommends it.
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    sys.path.pop(0)

from amplint.cli import main  # noqa: E402

sys.exit(main())
