"""`python -m rtrain_tui` is the same as the `rtrain-tui` command."""

from rtrain_tui import main

raise SystemExit(main())
