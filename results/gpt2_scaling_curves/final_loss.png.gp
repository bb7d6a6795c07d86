# Written by experiments/common/plot.cc; run in this directory: gnuplot final_loss.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "final_loss.png"
set datafile separator ","
set title "Final validation loss against non-embedding parameters, with power-law fits"
set xlabel "non-embedding parameters N (log scale)"
set ylabel "final validation loss (nats/token, log scale)"
set grid
set key outside right top box
set logscale x 2
set logscale y
plot "final_losses.csv" every ::1 using 3:(strcol(1) eq "equal tokens" ? $5 : NaN) with points title "equal tokens, measured", \
     "final_losses.csv" every ::1 using 3:(strcol(1) eq "equal tokens" ? $6 : NaN) with lines title "equal tokens, fit", \
     "final_losses.csv" every ::1 using 3:(strcol(1) eq "compute-matched" ? $5 : NaN) with points title "compute-matched, measured", \
     "final_losses.csv" every ::1 using 3:(strcol(1) eq "compute-matched" ? $6 : NaN) with lines title "compute-matched, fit"
