#!/bin/sh
# Written by rtrain-tui: the detached wrapper of one training run.
#@ liveness
#@ end_rest
if proc_fields $$ && [ -n "$start" ]; then
  boot_id
  printf '%s %s\n' "$start" "$bi" > train.ident.tmp && mv train.ident.tmp train.ident
fi
echo $$ > train.pid.tmp && mv train.pid.tmp train.pid
trap 'rt_signalled=1' TERM INT HUP
#@ unbuffered
#@ exports
## A template's `cd` (it runs in this shell, in braces) must not move where status lands.
rt_dir=$PWD
#@ trainer
rc=$?
cd "$rt_dir" || exit "$rc"
#@ retry
end_rest
echo $rc > status.tmp && mv status.tmp status
