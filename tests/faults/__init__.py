"""The fault suite: real CLI + real sshd + a proxy that breaks on command (see proxy.py)."""
