# Written by experiments/common/plot.cc; run in this directory: gnuplot final_loss.png.gp
set terminal pngcairo size 1100,600 enhanced font "sans,11"
set output "final_loss.png"
set datafile separator ","
set title "BERT final training loss vs depth (mean of the last 100 iterations; band ±1 sd over seeds)"
set xlabel "transformer layers"
set ylabel "final training loss, MLM + SOP (nats/token)"
set grid
set key outside right top box
plot "final_losses.csv" every ::1 using 1:(strcol(15) eq "post_h32" ? $13 : NaN):(strcol(15) eq "post_h32" ? $14 : NaN) with filledcurves fill transparent solid 0.2 noborder title "post-norm, hidden 32, ±1 sd", \
     "final_losses.csv" every ::1 using 1:(strcol(15) eq "post_h32" ? $4 : NaN) with linespoints title "post-norm, hidden 32, mean", \
     "final_losses_per_seed.csv" every ::1 using 1:(strcol(7) eq "post_h32" ? $4 : NaN) with points title "post-norm, hidden 32, each seed", \
     "final_losses.csv" every ::1 using 1:(strcol(15) eq "pre_h32" ? $13 : NaN):(strcol(15) eq "pre_h32" ? $14 : NaN) with filledcurves fill transparent solid 0.2 noborder title "pre-norm, hidden 32, ±1 sd", \
     "final_losses.csv" every ::1 using 1:(strcol(15) eq "pre_h32" ? $4 : NaN) with linespoints title "pre-norm, hidden 32, mean", \
     "final_losses_per_seed.csv" every ::1 using 1:(strcol(7) eq "pre_h32" ? $4 : NaN) with points title "pre-norm, hidden 32, each seed", \
     "final_losses.csv" every ::1 using 1:(strcol(15) eq "post_h64" ? $13 : NaN):(strcol(15) eq "post_h64" ? $14 : NaN) with filledcurves fill transparent solid 0.2 noborder title "post-norm, hidden 64, ±1 sd", \
     "final_losses.csv" every ::1 using 1:(strcol(15) eq "post_h64" ? $4 : NaN) with linespoints title "post-norm, hidden 64, mean", \
     "final_losses_per_seed.csv" every ::1 using 1:(strcol(7) eq "post_h64" ? $4 : NaN) with points title "post-norm, hidden 64, each seed", \
     "final_losses.csv" every ::1 using 1:(strcol(15) eq "pre_h64" ? $13 : NaN):(strcol(15) eq "pre_h64" ? $14 : NaN) with filledcurves fill transparent solid 0.2 noborder title "pre-norm, hidden 64, ±1 sd", \
     "final_losses.csv" every ::1 using 1:(strcol(15) eq "pre_h64" ? $4 : NaN) with linespoints title "pre-norm, hidden 64, mean", \
     "final_losses_per_seed.csv" every ::1 using 1:(strcol(7) eq "pre_h64" ? $4 : NaN) with points title "pre-norm, hidden 64, each seed"
