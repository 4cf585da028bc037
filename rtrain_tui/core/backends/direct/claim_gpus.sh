## Give the run in $rd the GPUs $want (I,J), under the box's GPU lock, unless a live run
## of ours (of any workdir on this box: gpu_box.sh) holds one by now; with $share=1
## (--allow-busy: sharing them is what the user asked for) whoever holds them. Needs
## liveness.sh, gpu_box.sh, gpu_rule.sh, $wd, $rd, $want, $share.
## A lock that cannot be taken (a read-only home) says why: `lock_failed=WHY`.
own_pgrp=none sh_pgrp=none
# The box's record names the run dir by its whole path: a relative workdir is the
# session's, i.e. under HOME.
case $rd in /*) ;; *) rd=$PWD/$rd;; esac
box_dir "$wd"; cg_box=$bx
if q_lock "$cg_box"; then
  cg_held=
  [ "$share" = 1 ] || cg_held=$(held_gpus "$wd" 1)
  cg_hit=
  for cg_h in $cg_held; do
    cg_i=${cg_h#gpu_held=}; cg_i=${cg_i%%,*}
    case ",$want," in *",$cg_i,"*) cg_hit=${cg_h#gpu_held=}; break;; esac
  done
  if [ -n "$cg_hit" ]; then
    echo "held=$cg_hit"
  else
    q_uptime; echo "$qu" > "$rd/gpus.claimed"
    if echo "$want" > "$rd/gpus.tmp" && mv "$rd/gpus.tmp" "$rd/gpus" && box_record "$rd"; then
      echo claimed=1
    else
      echo "lock_failed=cannot record the run's GPUs in $cg_box"
    fi
  fi
  q_unlock "$cg_box"
else
  echo "lock_failed=$ql_why"
fi
