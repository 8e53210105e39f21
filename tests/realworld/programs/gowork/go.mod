module collatz

go 1.19
