# Written by experiments/common/plot.cc; run in this directory: gnuplot strong_scaling.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "strong_scaling.png"
set datafile separator ","
set title "Strong scaling of the 1.2B model, batch 8"
set xlabel "GPUs (log scale)"
set ylabel "speedup over 1 GPU (x)"
set grid
set key outside right top box
set logscale x 2
plot "strong_scaling.csv" every ::1 using 1:2 with linespoints title "paper", \
     "strong_scaling.csv" every ::1 using 1:3 with linespoints title "model"
