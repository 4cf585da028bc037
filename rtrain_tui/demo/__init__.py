"""The built-in demo host: an SSH server inside the app, running commands on this machine.

See `server.py`. Nothing here imports Textual; the CLI can use the demo host too.
"""
