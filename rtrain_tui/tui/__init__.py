"""The full-screen app (Textual). Everything remote goes through rtrain_tui.core."""
