## Record a verified stop: `status` as the seed's wrapper would (if none), then
## `stopped`. Needs $rd, $code.
[ -e "$rd/status" ] || { echo "$code" > "$rd/status.tmp" && mv "$rd/status.tmp" "$rd/status"; }
: > "$rd/stopped" && echo marked=1
