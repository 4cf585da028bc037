"""Transport: reaching a host. The SSH connection (options, host keys, the long-lived
shell), ~/.ssh/config, the OpenSSH pipe for bulk copies, and the bound on every await.

Layer: above safety and errors, below metrics (docs/design.md, "Layers").
"""
