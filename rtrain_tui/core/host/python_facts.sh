## `python=X.Y.Z` (or `missing`) and whether the trainer imports; sets $T (a timeout
## prefix) for what follows. Needs $py, the interpreter (its `~` already expanded).
if command -v timeout >/dev/null 2>&1; then T="timeout 10"; else T=; fi
if command -v "$py" >/dev/null 2>&1; then
  $T "$py" -c 'import sys, importlib.util as u
print("python=%d.%d.%d" % sys.version_info[:3])
print("trainer=" + ("ok" if u.find_spec("praisonai_train") else "missing"))' 2>&1 | sed -n '1,5p'
else
  echo "python=missing"
fi
