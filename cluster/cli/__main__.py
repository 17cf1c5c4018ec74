"""``python -m cluster.cli``: the ``wonder`` command."""

from cluster.cli.entry import main

raise SystemExit(main())
