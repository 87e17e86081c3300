#!/usr/bin/env bash
# Draws docs/io_traffic.png from the output of scripts/measure_io.sh: bytes moved between main memory and
# the cache against N, log axes, one panel per head dimension — the model (lines), the count of the
# instrumented run (open circles) and the cachegrind measurement (filled points) with the simulated LL the
# per-core L2 (the model's fast memory M) and, from a second file, the L3.
#
#   scripts/plot_io.sh [DATA=docs/io_traffic.dat] [L3_DATA=docs/io_traffic_l3.dat] [OUT=docs/io_traffic.png]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=${1:-$root/docs/io_traffic.dat}
l3=${2:-$root/docs/io_traffic_l3.dat}
out=${3:-$root/docs/io_traffic.png}
if ! command -v gnuplot >/dev/null; then
  echo "plot_io.sh: needs gnuplot (apt-get install gnuplot-nox)" >&2
  exit 1
fi
[[ -f $l3 ]] || l3=/dev/null

mib() {  # the LL size of a data file (column 4 of its first data line), in MiB
  awk '!/^#/ { printf "%g MiB", $4 / 1048576; exit }' "$1"
}
ll=$(mib "$data")
ll3=$(mib "$l3")

rows() {  # $1 = file, $2 = algorithm, $3 = d: an awk filter gnuplot reads as a data source
  echo "< awk '\$1 ~ /^$2\$/ && \$3 == $3' $1"
}

panel() {  # $1 = d
  local d=$1 s f
  s=$(rows "$data" standard "$d")
  f=$(rows "$data" fused "$d")
  cat <<GNUPLOT
set title "d = $d, one head, float32, one thread"
plot \\
  "$s" using 2:5 with lines lw 2 lc rgb "#c0392b" title "standard model (4Nd+4N^2 + LSE)", \\
  "$s" using 2:(\$6 > 0 ? \$6 : 1/0) with points pt 6 ps 1.8 lc rgb "#c0392b" title "standard counted", \\
  "$s" using 2:7 with linespoints pt 7 dt 2 lc rgb "#e67e22" title "standard measured, LL $ll", \\
  "$(rows "$l3" standard "$d")" using 2:7 with points pt 5 ps 1.2 lc rgb "#7f8c8d" \\
    title "standard measured, LL $ll3", \\
  "$f" using 2:5 with lines lw 2 lc rgb "#2471a3" title "fused model", \\
  "$f" using 2:(\$6 > 0 ? \$6 : 1/0) with points pt 6 ps 1.8 lc rgb "#2471a3" title "fused counted", \\
  "$f" using 2:7 with linespoints pt 9 dt 2 lc rgb "#17a589" title "fused measured, LL $ll", \\
  "$(rows "$l3" fused "$d")" using 2:7 with points pt 11 ps 1.2 lc rgb "#34495e" \
    title "fused measured, LL $ll3"
GNUPLOT
}

{
  cat <<GNUPLOT
set terminal pngcairo size 1100,480 font ",9"
set output "$out"
set logscale xy 2
set format y "%.0s%cB"
set xlabel "N (= Nq = Nk)"
set ylabel "bytes between memory and the last-level cache"
set key top left font ",8" spacing 0.9
set grid
set multiplot layout 1,2
GNUPLOT
  panel 64
  panel 128
  echo "unset multiplot"
} | gnuplot
echo "wrote $out" >&2
