## Give the run in $rd the GPUs $want (I,J), under the host's GPU lock, unless a live run
## of ours under $wd holds one by now; with $share=1 (--allow-busy: sharing them is what
## the user asked for) whoever holds them. Needs liveness.sh, gpu_rule.sh, $wd, $rd,
## $want, $share.
## A lock that cannot be taken (a read-only workdir) says why: `lock_failed=WHY`.
own_pgrp=none sh_pgrp=none
if q_lock "$wd/.queue"; then
  cg_held=
  [ "$share" = 1 ] || cg_held=$(held_gpus "$wd")
  cg_hit=
  for cg_h in $cg_held; do
    cg_i=${cg_h#gpu_held=}; cg_i=${cg_i%%,*}
    case ",$want," in *",$cg_i,"*) cg_hit=${cg_h#gpu_held=}; break;; esac
  done
  if [ -n "$cg_hit" ]; then
    echo "held=$cg_hit"
  else
    q_uptime; echo "$qu" > "$rd/gpus.claimed"
    echo "$want" > "$rd/gpus.tmp" && mv "$rd/gpus.tmp" "$rd/gpus" && echo claimed=1
  fi
  q_unlock "$wd/.queue"
else
  echo "lock_failed=$ql_why"
fi
