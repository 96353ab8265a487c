#!/usr/bin/env bash
# What a device run carries: the working tree (tracked files and untracked files git does not ignore) plus the
# carried paths given as arguments (default .gpu-kit). Prints the total; exits 1 above the 64 MiB limit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
carry=("$@")
[ ${#carry[@]} -gt 0 ] || carry=(.gpu-kit)
tree=$( { git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null || true; } \
        | awk '{s += $1} END {print s + 0}')
extra=0
for path in "${carry[@]}"; do
  [ -e "$path" ] && extra=$((extra + $(du -sb -- "$path" | cut -f1)))
done
total=$((tree + extra))
limit=$((64 * 1024 * 1024))
awk -v t="$tree" -v e="$extra" -v c="${carry[*]}" 'BEGIN {
  printf "travels: working tree %.1f MiB + carried (%s) %.1f MiB = %.1f MiB of 64 MiB\n", t / 1048576, c, e / 1048576,
         (t + e) / 1048576 }'
[ "$total" -le "$limit" ]
