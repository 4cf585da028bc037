"""Demo host only: stands in for the real praisonai_train package (see rtrain_tui.demo)."""
