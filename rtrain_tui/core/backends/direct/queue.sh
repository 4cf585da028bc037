## Waiting for free GPUs on the host (`start --queue`): a step of its own in the wrapper,
## so that a retry can wait the same way before its next attempt. Needs liveness.sh,
## gpu_box.sh, gpu_rule.sh, `gs_sample` (gpu_sample.sh) and the run directory as the
## working one.
##
## The queue is the box's (gpu_box.sh: one per host and user, whatever the workdir, so
## runs of every workdir are served in one order): one entry per waiting run, `q<seq>`
## (a number taken under the lock, zero-padded so the shell's sorted glob is the queue's
## order) holding the waiter's pid and identity. Only the head samples the GPUs, under the lock, at most
## once every 5 s (or the seconds in its `every`) for the whole queue, however many
## wait; the others sleep and look again (a glob and a read, no fork but `sleep`), the
## further back the longer (up to 6 periods). A head whose wrapper is gone (killed, the
## host rebooted) is taken out by the next in line.
##
## `wait_for_gpus COUNT IDS`: 0 once the run has its GPUs (in `gpus`, and exported as
## CUDA_VISIBLE_DEVICES); 1 when a stop came first (the run never got any); 2 when the
## host's GPU lock cannot be taken (a read-only home: `wq_why` says why). While it
## waits, `queued` in the run directory says `PLACE<TAB>REASON` for the probe.
wait_for_gpus() {
  box_dir "${PWD%/*}"; wq_dir=$bx wq_every=''
  read -r wq_every 2>/dev/null < "$wq_dir/every"
  case $wq_every in ''|*[!0-9]*|0) wq_every=5;; esac
  q_lock "$wq_dir" || { wq_why=$ql_why; return 2; }
  wq_seq=''; read -r wq_seq 2>/dev/null < "$wq_dir/seq"
  case $wq_seq in ''|*[!0-9]*) wq_seq=0;; esac
  wq_seq=$((wq_seq + 1)); echo "$wq_seq" > "$wq_dir/seq"
  wq_me=$wq_dir/q$(printf '%012d' "$wq_seq")
  wq_who=$$; proc_fields $$ && [ -n "$start" ] && boot_id && wq_who="$$ $start $bi"
  echo "$wq_who ${PWD##*/}" > "$wq_me"
  q_unlock "$wq_dir"
  if [ -n "$2" ]; then wq_what="GPU(s) $2"; else wq_what="$1 free GPU(s)"; fi
  wq_said='' wq_why="waiting for $wq_what"
  own_pgrp=none sh_pgrp=none  # for is_live: no group of ours to spare
  while :; do
    if [ -n "$rt_signalled" ] || [ -e stop_requested ]; then
      rm -f "$wq_me" queued; return 1
    fi
    wq_place=0
    for wq_e in "$wq_dir"/q[0-9]*; do
      [ -e "$wq_e" ] || continue
      wq_place=$((wq_place + 1))
      [ "$wq_e" = "$wq_me" ] && break
      if [ $wq_place = 1 ]; then  # the head: is its wrapper still there?
        wq_p='' wq_s='' wq_b=''; read -r wq_p wq_s wq_b _ 2>/dev/null < "$wq_e"
        if [ -n "$wq_s" ]; then is_live "$wq_p" "$wq_s $wq_b" ""; else usable "$wq_p"; fi ||
          { rm -f "$wq_e"; wq_place=0; }
      fi
    done
    if [ "$wq_place" = 1 ]; then
      q_lock "$wq_dir" || { rm -f "$wq_me" queued; wq_why=$ql_why; return 2; }
      q_uptime; wq_last=''; read -r wq_last 2>/dev/null < "$wq_dir/sampled"
      case $wq_last in ''|*[!0-9]*) wq_last=0;; esac
      if [ $((qu - wq_last)) -ge "$wq_every" ] || [ "$qu" -lt "$wq_last" ]; then
        echo "$qu" > "$wq_dir/sampled"
        wq_out=$({ gs_sample; held_gpus "${PWD%/*}" 1; } | gpu_rule "$1" "$2")
        case $wq_out in
          *"take="*)
            wq_take=${wq_out##*take=}
            echo "$wq_take" > gpus.tmp && mv gpus.tmp gpus && box_record "$PWD"
            rm -f "$wq_me" queued
            q_unlock "$wq_dir"
            CUDA_VISIBLE_DEVICES=$wq_take CUDA_DEVICE_ORDER=PCI_BUS_ID
            export CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER
            return 0;;
          *"why="*) wq_why=${wq_out##*why=}; printf '%s\n' "$wq_why" > "$wq_dir/why";;
        esac
      fi
      q_unlock "$wq_dir"
    else
      # Behind others: say why the head waits, and where this run stands.
      wq_h=''; read -r wq_h 2>/dev/null < "$wq_dir/why"
      case $wq_h in
        *": "*) wq_why="waiting for $wq_what: ${wq_h#*: }";;
        *) wq_why="waiting for $wq_what";;
      esac
    fi
    if [ "$wq_said" != "$wq_place $wq_why" ]; then
      printf '%s\t%s\n' "$wq_place" "$wq_why" > queued.tmp && mv queued.tmp queued
      wq_said="$wq_place $wq_why"
    fi
    # Place P cannot be served before P-1 runs ahead were (one sample each, at most one
    # per period): it looks again later, up to 6 periods (a run ahead may be stopped).
    wq_nap=$((wq_place - 1)); [ $wq_nap -ge 1 ] || wq_nap=1; [ $wq_nap -le 6 ] || wq_nap=6
    sleep $((wq_every * wq_nap))
  done
}
