"""``python -m loopscribe.viewer serve|report|stats``: the viewer without the main CLI."""

import sys

from ..cli._viewer import main

if __name__ == "__main__":
    sys.exit(main())
