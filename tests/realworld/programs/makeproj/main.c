/* The multi-file project default_path.rs builds with `make -j2` under ptscope, then runs. */
#include <stdio.h>
#include <stdlib.h>
#include "proj.h"

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 20000;

	printf("%u\n", hash_run(n) ^ sort_run(n) ^ fmt_run(n) ^ parse_run(n) ^ vec_run(n) ^
			       tree_run(n));
	return 0;
}
