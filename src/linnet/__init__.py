"""Linnet: a typed tensor language whose shapes are types.

This package's top level stays light: importing `linnet` loads no framework,
so `linnet check` starts as fast as a bare interpreter allows.
"""

from linnet.errors import LinnetError

__version__ = "0.1.0"

__all__ = ["LinnetError", "__version__"]
