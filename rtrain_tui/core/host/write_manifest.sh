## Store a dataset's chunk manifest as $c/$sha (transfers/delta.py): written under the
## temporary name $t, renamed once complete, so a reader never sees half of one; a full
## disk leaves nothing. The manifest's lines follow the command, as a here-document.
# shellcheck disable=SC2174  # only the manifests' directory is made private, not its parents
mkdir -p -m 700 "$c" || exit 1
if cat > "$c/$t" <<'RTRAIN_MANIFEST_END' && mv -f "$c/$t" "$c/$sha"; then echo written=1; else rm -f "$c/$t"; fi
#@ body
RTRAIN_MANIFEST_END
