## Python buffers stdout that goes to a file: a real Trainer's loss lines reached train.log
## in 8 KiB bursts, long after the bar had moved on, so every point landed at a wrong step.
## Set unless the trainer's environment already says (the user's `--env` comes after it).
[ -n "${PYTHONUNBUFFERED+set}" ] || { PYTHONUNBUFFERED=1; export PYTHONUNBUFFERED; }
