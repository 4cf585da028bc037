"""`python -m praisonai_train llm [DATASET] --config config.yaml` on the demo host."""

from rtrain_tui.demo.trainer import main

raise SystemExit(main())
