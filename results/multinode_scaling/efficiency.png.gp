# Written by experiments/common/plot.cc; run in this directory: gnuplot efficiency.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "efficiency.png"
set datafile separator ","
set title "Data-parallel efficiency across a link (DP=2, one rank per node)"
set xlabel "the link's rate as the non-blocking all-reduce measures it (Gbit/s)"
set ylabel "efficiency: one rank's step / DP=2 step (%)"
set grid
set key outside right top box
set logscale x 2
set yrange [0:110]
plot "scaling.csv" every ::1 using 2:14 with linespoints title "measured, all-reduce after backward", \
     "scaling.csv" every ::1 using 2:15 with lines title "predicted, after backward", \
     "scaling.csv" every ::1 using 2:16 with linespoints title "measured, overlapped with backward", \
     "scaling.csv" every ::1 using 2:17 with linespoints title "measured, overlapped, --mpi_async_progress", \
     "scaling.csv" every ::1 using 2:18 with lines title "predicted, overlapped"
