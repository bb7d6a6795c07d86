# Written by experiments/common/plot.cc; run in this directory: gnuplot val_ppl.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "val_ppl.png"
set datafile separator ","
set title "GPT-2 validation perplexity at equal tokens (paper Figure 6)"
set xlabel "iteration (optimizer steps of 512 tokens)"
set ylabel "validation perplexity (log scale)"
set grid
set key outside right top box
set logscale y
plot "val_curves.csv" every ::1 using 3:(strcol(1) eq "1L-32H" ? $5 : NaN) with linespoints title "1L-32H, 1.6M parameters", \
     "val_curves.csv" every ::1 using 3:(strcol(1) eq "2L-48H" ? $5 : NaN) with linespoints title "2L-48H, 2.5M parameters", \
     "val_curves.csv" every ::1 using 3:(strcol(1) eq "2L-64H" ? $5 : NaN) with linespoints title "2L-64H, 3.3M parameters", \
     "val_curves.csv" every ::1 using 3:(strcol(1) eq "3L-96H" ? $5 : NaN) with linespoints title "3L-96H, 5.2M parameters", \
     "val_curves.csv" every ::1 using 3:(strcol(1) eq "4L-128H" ? $5 : NaN) with linespoints title "4L-128H, 7.2M parameters"
