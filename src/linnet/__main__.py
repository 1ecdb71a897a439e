"""`python -m linnet`: the same as the `linnet` console script."""

from linnet.cli import main

raise SystemExit(main())
