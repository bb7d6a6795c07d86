# Written by experiments/common/plot.cc; run in this directory: gnuplot efficiency.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "efficiency.png"
set datafile separator ","
set title "Weak scaling (paper Table 1 / Figure 5): paper vs performance model"
set xlabel "GPUs (log scale)"
set ylabel "weak-scaling efficiency (% of 1 GPU's per-GPU FLOP/s)"
set grid
set key outside right top box
set logscale x 2
set yrange [50:105]
plot "efficiency.csv" every ::1 using 2:(strcol(3) eq "mp" ? $4 : NaN) with linespoints title "paper, model parallel", \
     "efficiency.csv" every ::1 using 2:(strcol(3) eq "mp" ? $5 : NaN) with linespoints title "model, model parallel", \
     "efficiency.csv" every ::1 using 2:(strcol(3) eq "mp_dp" ? $4 : NaN) with linespoints title "paper, model+data parallel", \
     "efficiency.csv" every ::1 using 2:(strcol(3) eq "mp_dp" ? $5 : NaN) with linespoints title "model, model+data parallel"
