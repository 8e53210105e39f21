/* Hits a trigger function three times, GAP seconds apart (default_path.rs: one snapshot
 * per hit). Build: gcc -O1 -g -o hits hits.c */
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

volatile unsigned long sink;

__attribute__((noinline)) void spin(double s)
{
	double e = now() + s;

	while (now() < e)
		sink++;
}

/* The trigger. */
__attribute__((noinline)) void mid(int i)
{
	sink += i;
}

int main(int argc, char **argv)
{
	double gap = argc > 1 ? atof(argv[1]) : 0.02;

	spin(0.2);
	for (int i = 0; i < 3; i++) {
		mid(i);
		spin(gap);
	}
	spin(0.1);
	return 0;
}
