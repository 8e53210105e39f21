// Collatz chain lengths: main.work calls main.collatz in a hot loop, plus a goroutine
// doing the same so the runtime's scheduler threads appear.
package main

import (
	"fmt"
	"os"
	"strconv"
)

//go:noinline
func collatz(n uint64) uint64 {
	steps := uint64(0)
	for n != 1 {
		if n%2 == 0 {
			n /= 2
		} else {
			n = 3*n + 1
		}
		steps++
	}
	return steps
}

//go:noinline
func work(limit uint64) uint64 {
	total := uint64(0)
	for i := uint64(1); i < limit; i++ {
		total += collatz(i)
	}
	return total
}

func main() {
	limit := uint64(1200000)
	if len(os.Args) > 1 {
		if v, err := strconv.ParseUint(os.Args[1], 10, 64); err == nil {
			limit = v
		}
	}
	done := make(chan uint64)
	go func() { done <- work(limit / 2) }()
	t := work(limit)
	fmt.Println(t + <-done)
}
