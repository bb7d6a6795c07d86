# Written by experiments/common/plot.cc; run in this directory: gnuplot final_loss.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "final_loss.png"
set datafile separator ","
set title "BERT final training loss vs depth (mean of the last 10 iterations)"
set xlabel "transformer layers"
set ylabel "final training loss, MLM + SOP (nats/token)"
set grid
set key outside right top box
plot "final_losses.csv" every ::1 using 1:(strcol(2) eq "post" ? $4 : NaN) with linespoints title "post-norm, mean over seeds", \
     "final_losses.csv" every ::1 using 1:(strcol(2) eq "pre" ? $4 : NaN) with linespoints title "pre-norm, mean over seeds", \
     "final_losses_per_seed.csv" every ::1 using 1:(strcol(2) eq "post" ? $4 : NaN) with points title "post-norm, each seed", \
     "final_losses_per_seed.csv" every ::1 using 1:(strcol(2) eq "pre" ? $4 : NaN) with points title "pre-norm, each seed"
