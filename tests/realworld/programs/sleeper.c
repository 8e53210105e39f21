/* A thread that computes, sleeps in a function of its own, and computes again
 * (default_path.rs): the sleep must show inside `sleeper`, and `main` as one call.
 * Build: gcc -O2 -g -o sleeper sleeper.c */
#include <stdio.h>
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Busy for `secs` of wall time. */
__attribute__((noinline)) double spin(double secs)
{
	double end = now() + secs, x = 0;

	while (now() < end)
		for (int i = 0; i < 1000; i++)
			x += i * 0.5;
	return x;
}

__attribute__((noinline)) void sleeper(void)
{
	struct timespec ts = { 0, 300000000 };

	nanosleep(&ts, NULL);
}

int main(void)
{
	double x = spin(0.1);

	sleeper();
	x += spin(0.1);
	printf("%g\n", x);
	return 0;
}
