## Hard-link $src to $dst (same file system), copying where links fail. `cmp` before
## `cp`: sent again after a dropped connection, the link already exists and `cp` would
## refuse to copy a file onto itself (POSIX `test` has no `-ef`).
{ ln -- "$src" "$dst" 2>/dev/null || cmp -s -- "$src" "$dst" || cp -- "$src" "$dst"; } && echo linked=1
