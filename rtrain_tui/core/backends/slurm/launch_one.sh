## One node. Braces keep a template's `a; b` together in the background job (and away
## from this shell's traps); dash runs a lone command in them without a subshell, so
## `$child` is the trainer itself and the forwarded TERM reaches it.
{
#@ trainer
} < /dev/null &
