## Record a verified stop: `status` as the seed's wrapper would (if none), then
## `stopped`. Not once `stop_requested` is gone: a resume that claimed a new attempt
## since moved it to attempts/N with the stopped attempt's other files, and the new
## attempt must not read as stopped (`marked=0`). Needs $rd, $code.
[ -e "$rd/stop_requested" ] || { echo marked=0; exit 0; }
[ -e "$rd/status" ] || { echo "$code" > "$rd/status.tmp" && mv "$rd/status.tmp" "$rd/status"; }
: > "$rd/stopped" && echo marked=1
