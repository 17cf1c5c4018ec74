"""``python -m cluster.cli``: the ``wonder`` command."""

from cluster.cli.main import main

raise SystemExit(main())
