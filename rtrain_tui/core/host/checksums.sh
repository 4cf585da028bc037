## `sha256  ./path` for each file named in "$@" (each with `./` in front), in $dir.
cd "$dir" || exit 1
if command -v sha256sum >/dev/null 2>&1; then S=sha256sum; else S='shasum -a 256'; fi
$S -- "$@"
