## Submit run.sbatch once; print `job=ID`, `error=...` or `unknown=...` (and
## `message=...`). Needs $rd, $tok, submitting.sh.
cd "$rd" || { echo "error=no run directory"; exit 0; }
rf=; [ -r train.token ] && read -r rf < train.token
if [ "$rf" != "$tok" ]; then echo "error=not this start's run directory"; exit 0; fi
if ! command -v sbatch >/dev/null 2>&1; then echo "error=sbatch not found on the login node"; exit 0; fi
if mkdir launch.lock 2>/dev/null; then
  rm -f submit_error submit_message submit_unknown
  # In the background, so that its marker names it while it runs (submitting.sh): a
  # slow sbatch reads `starting`, never `lost`, and no resume supersedes its attempt.
  sbatch --parsable run.sbatch > submit_out.tmp 2> submit_message.tmp < /dev/null &
  sp=$!
  submit_mark "$sp"
  wait "$sp"; src=$?
  out=$(cat submit_out.tmp 2>/dev/null)
  if [ "$src" = 0 ]; then
    [ -s submit_message.tmp ] && tr '\n' ' ' < submit_message.tmp > submit_message
    id=$(printf '%s\n' "$out" | awk -F';' '$1 ~ /^[0-9]+(_[0-9]+)?$/ { id = $1 } END { print id }')
    if [ -n "$id" ]; then printf '%s\n' "$id" > slurm_job_id.tmp && mv slurm_job_id.tmp slurm_job_id
    else printf '%s\n' "${out:-(nothing)}" | tr '\n' ' ' > submit_unknown; fi
  else
    { cat submit_message.tmp; printf '%s\n' "$out"; } | tr '\n' ' ' > submit_error; rmdir launch.lock
  fi
  rm -f submit_message.tmp submit_out.tmp submitting
fi
i=0
while [ ! -s slurm_job_id ] && [ ! -s submit_error ] && [ ! -s submit_unknown ] && [ $i -lt 300 ]; do
  sleep 0.1; i=$((i + 1))
done
if [ -s slurm_job_id ]; then echo "job=$(cat slurm_job_id)"
elif [ -s submit_error ]; then echo "error=$(head -c 300 submit_error)"
elif [ -s submit_unknown ]; then echo "unknown=$(head -c 300 submit_unknown)"
else echo "error=sbatch gave no job id within 30 s"; fi
if [ ! -s submit_error ] && [ -s submit_message ]; then echo "message=$(head -c 300 submit_message)"; fi
