#!/usr/bin/env bash
# Draws docs/io_traffic.png from the output of scripts/measure_io.sh: bytes moved between main memory and
# the cache against N, log axes, one panel per head dimension — the model (lines), the count of the
# instrumented reference (open circles) and the cachegrind measurement (filled points; LL = 512 KiB, the
# model's fast memory, and for a few points the machine's 32 MiB L3).
#
#   scripts/plot_io.sh [DATA=docs/io_traffic.dat] [L3_DATA=docs/io_traffic_l3.dat] [OUT=docs/io_traffic.png]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=${1:-$root/docs/io_traffic.dat}
l3=${2:-$root/docs/io_traffic_l3.dat}
out=${3:-$root/docs/io_traffic.png}
if ! command -v gnuplot >/dev/null; then
  echo "plot_io.sh: installing gnuplot-nox" >&2
  apt-get install -y gnuplot-nox >/dev/null
fi
[[ -f $l3 ]] || l3=/dev/null

panel() {  # $1 = d
  local d=$1
  cat <<GNUPLOT
set title "d = $d, one head, float32"
plot \
  "< awk '\$1==\"standard\" && \$3==$d' $data" using 2:5 with lines lw 2 lc rgb "#c0392b" title "standard model (4Nd+4N^2 +LSE)", \
  "< awk '\$1==\"standard\" && \$3==$d' $data" using 2:6 with points pt 6 ps 1.6 lc rgb "#c0392b" title "standard counted", \
  "< awk '\$1==\"standard\" && \$3==$d' $data" using 2:7 with linespoints pt 7 dt 2 lc rgb "#e67e22" title "standard measured, LL 512K", \
  "< awk '\$1==\"standard\" && \$3==$d' $l3" using 2:7 with points pt 5 lc rgb "#7f8c8d" title "standard measured, LL 32M", \
  "< awk '\$1==\"fused\" && \$3==$d' $data" using 2:5 with lines lw 2 lc rgb "#2471a3" title "fused model", \
  "< awk '\$1==\"fused\" && \$3==$d' $data" using 2:7 with linespoints pt 9 dt 2 lc rgb "#17a589" title "fused measured, LL 512K", \
  "< awk '\$1==\"fused\" && \$3==$d' $l3" using 2:7 with points pt 11 lc rgb "#34495e" title "fused measured, LL 32M"
GNUPLOT
}

{
  cat <<GNUPLOT
set terminal pngcairo size 1100,460 font ",9"
set output "$out"
set logscale xy 2
set format y "%.0s%cB"
set xlabel "N (= Nq = Nk)"
set ylabel "bytes between memory and cache"
set key bottom right font ",8" spacing 0.9
set grid
set multiplot layout 1,2
GNUPLOT
  panel 64
  panel 128
  echo "unset multiplot"
} | gnuplot
echo "wrote $out" >&2
