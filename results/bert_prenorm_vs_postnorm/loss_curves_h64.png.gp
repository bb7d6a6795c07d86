# Written by experiments/common/plot.cc; run in this directory: gnuplot loss_curves_h64.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "loss_curves_h64.png"
set datafile separator ","
set title "BERT training loss, post-norm vs pre-norm (hidden 64, lr 0.003, mean and ±1 sd over seeds)"
set xlabel "iteration (optimizer steps)"
set ylabel "training loss, MLM + SOP (nats/token)"
set grid
set key outside right top box
plot "mean_curves.csv" every ::1 using 4:(strcol(1) eq "post_2_h64" ? $7 : NaN):(strcol(1) eq "post_2_h64" ? $8 : NaN) with filledcurves fill transparent solid 0.2 noborder title "post-norm, 2 layers, ±1 sd", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "post_2_h64" ? $6 : NaN) with lines title "post-norm, 2 layers", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "pre_2_h64" ? $7 : NaN):(strcol(1) eq "pre_2_h64" ? $8 : NaN) with filledcurves fill transparent solid 0.2 noborder title "pre-norm, 2 layers, ±1 sd", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "pre_2_h64" ? $6 : NaN) with lines title "pre-norm, 2 layers", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "post_4_h64" ? $7 : NaN):(strcol(1) eq "post_4_h64" ? $8 : NaN) with filledcurves fill transparent solid 0.2 noborder title "post-norm, 4 layers, ±1 sd", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "post_4_h64" ? $6 : NaN) with lines title "post-norm, 4 layers", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "pre_4_h64" ? $7 : NaN):(strcol(1) eq "pre_4_h64" ? $8 : NaN) with filledcurves fill transparent solid 0.2 noborder title "pre-norm, 4 layers, ±1 sd", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "pre_4_h64" ? $6 : NaN) with lines title "pre-norm, 4 layers", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "post_8_h64" ? $7 : NaN):(strcol(1) eq "post_8_h64" ? $8 : NaN) with filledcurves fill transparent solid 0.2 noborder title "post-norm, 8 layers, ±1 sd", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "post_8_h64" ? $6 : NaN) with lines title "post-norm, 8 layers", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "pre_8_h64" ? $7 : NaN):(strcol(1) eq "pre_8_h64" ? $8 : NaN) with filledcurves fill transparent solid 0.2 noborder title "pre-norm, 8 layers, ±1 sd", \
     "mean_curves.csv" every ::1 using 4:(strcol(1) eq "pre_8_h64" ? $6 : NaN) with lines title "pre-norm, 8 layers"
