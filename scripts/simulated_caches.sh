# Sourced by measure_io.sh and sweep_blocks.sh: the caches valgrind's cache simulator is given, as
# "BYTES,WAYS" pairs, unless the caller's environment sets them: D1 = this machine's level-1 data cache and
# LL = its level-2 cache (per core), both read from /sys/devices/system/cpu/cpu0/cache. $script names the
# sourcing script in the error message.

cache() {  # $1 = level, $2 = size (in bytes) or ways_of_associativity of the data/unified cache of that level
  local dir
  for dir in /sys/devices/system/cpu/cpu0/cache/index*; do
    [[ $(cat "$dir/level") == "$1" && $(cat "$dir/type") != Instruction ]] || continue
    if [[ $2 == size ]]; then numfmt --from=iec "$(cat "$dir/size")"; else cat "$dir/$2"; fi
    return
  done
  echo "$script: no level-$1 cache in sysfs; set LL and D1" >&2
  exit 1
}
D1=${D1:-$(cache 1 size),$(cache 1 ways_of_associativity)}
LL=${LL:-$(cache 2 size),$(cache 2 ways_of_associativity)}
