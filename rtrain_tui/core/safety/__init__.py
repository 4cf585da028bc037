"""Safety: what a user typed is validated, quoted or sanitized here before it reaches a
remote shell or the terminal.

Layer: above errors only (docs/design.md, "Layers").
"""
