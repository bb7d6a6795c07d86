# Written by experiments/common/plot.cc; run in this directory: gnuplot lambada_acc.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "lambada_acc.png"
set datafile separator ","
set title "Zero-shot LAMBADA-format last-word accuracy vs model size (paper Table 2)"
set xlabel "parameters (millions, log scale)"
set ylabel "accuracy (% of examples, strict whole word)"
set grid
set key below vertical maxrows 4 box
set bmargin 8
set logscale x 2
set yrange [0:100]
plot "lambada_points.csv" every ::1 using 2:(strcol(1) eq "paper" ? $3 : NaN) with linespoints title "paper (LAMBADA test)", \
     "lambada_points.csv" every ::1 using 2:(strcol(1) eq "d0" ? $3 : NaN) with linespoints title "ours (1505 held-out documents (the 456 with a copy passage))"
