## Print how many live (non-zombie) members the run has. Needs liveness.sh, $rd.
own_groups
run_members "$rd"
# shellcheck disable=SC2086  # counted as words
set -- $members; echo "alive=$#"
