# Written by experiments/common/plot.cc; run in this directory: gnuplot wikitext_ppl.png.gp
set terminal pngcairo size 900,600 enhanced font "sans,11"
set output "wikitext_ppl.png"
set datafile separator ","
set title "Zero-shot WikiText-103-format perplexity vs model size (paper Table 2)"
set xlabel "parameters (millions, log scale)"
set ylabel "adjusted perplexity (per original token, log scale)"
set grid
set key below vertical maxrows 4 box
set bmargin 8
set logscale x 2
set logscale y
plot "wikitext_points.csv" every ::1 using 2:(strcol(1) eq "paper" ? $3 : NaN) with linespoints title "paper (WikiText-103 test)", \
     "wikitext_points.csv" every ::1 using 2:(strcol(1) eq "d0" ? $3 : NaN) with linespoints title "ours (500 held-out documents)"
