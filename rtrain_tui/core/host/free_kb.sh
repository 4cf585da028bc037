## Print the free KiB on the file system that holds $d (nothing when df cannot say).
df -Pk "$d" 2>/dev/null | awk 'NR==2 {print $4}'
