/* One module of the multi-file project `make -j2` builds under ptscope (default_path.rs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "proj.h"

/* Inlined into vec_run: its samples show vec_mix as a frame of its own (from DWARF). */
static inline __attribute__((always_inline)) unsigned vec_mix(unsigned x)
{
	for (int i = 0; i < 64; i++) {
		x ^= x >> 16;
		x *= 0x7feb352d;
		x ^= x >> 15;
	}
	return x;
}

struct vec_item {
	unsigned key;
	char name[20];
};

static int vec_cmp(const void *a, const void *b)
{
	const struct vec_item *x = a, *y = b;
	return (x->key > y->key) - (x->key < y->key);
}

unsigned vec_run(unsigned n)
{
	struct vec_item *v = calloc(n, sizeof *v);
	unsigned h = 0;

	if (!v)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		v[i].key = vec_mix(i);
		snprintf(v[i].name, sizeof v[i].name, "vec-%u", i);
	}
	qsort(v, n, sizeof *v, vec_cmp);
	for (unsigned i = 0; i < n; i++)
		h = h * 31 + v[i].key + (unsigned)strlen(v[i].name);
	free(v);
	return h;
}
