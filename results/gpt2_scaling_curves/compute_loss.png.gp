# Written by experiments/common/plot.cc; run in this directory: gnuplot compute_loss.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "compute_loss.png"
set datafile separator ","
set title "Compute-matched runs: validation loss against training FLOPs"
set xlabel "training FLOPs (6 N T + 6 L T d per token; log scale)"
set ylabel "validation loss (nats/token)"
set grid
set key outside right top box
set logscale x 2
plot "compute_curves.csv" every ::1 using 5:(strcol(1) eq "1L-32H compute-matched" ? $6 : NaN) with linespoints title "1L-32H compute-matched", \
     "compute_curves.csv" every ::1 using 5:(strcol(1) eq "2L-48H compute-matched" ? $6 : NaN) with linespoints title "2L-48H compute-matched", \
     "compute_curves.csv" every ::1 using 5:(strcol(1) eq "2L-64H compute-matched" ? $6 : NaN) with linespoints title "2L-64H compute-matched", \
     "compute_curves.csv" every ::1 using 5:(strcol(1) eq "3L-96H compute-matched" ? $6 : NaN) with linespoints title "3L-96H compute-matched", \
     "compute_curves.csv" every ::1 using 5:(strcol(1) eq "4L-128H compute-matched" ? $6 : NaN) with linespoints title "4L-128H compute-matched"
