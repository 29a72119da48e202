"""``python -m tuneplat.cli``: the ``tuneplat`` command."""

from __future__ import annotations

import sys

from ._main import main

sys.exit(main())
