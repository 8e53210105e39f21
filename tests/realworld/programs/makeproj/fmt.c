/* One module of the multi-file project `make -j2` builds under ptscope (default_path.rs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "proj.h"

/* Inlined into fmt_run: its samples show fmt_mix as a frame of its own (from DWARF). */
static inline __attribute__((always_inline)) unsigned fmt_mix(unsigned x)
{
	for (int i = 0; i < 64; i++) {
		x ^= x >> 16;
		x *= 0x7feb352d;
		x ^= x >> 15;
	}
	return x;
}

struct fmt_item {
	unsigned key;
	char name[20];
};

static int fmt_cmp(const void *a, const void *b)
{
	const struct fmt_item *x = a, *y = b;
	return (x->key > y->key) - (x->key < y->key);
}

unsigned fmt_run(unsigned n)
{
	struct fmt_item *v = calloc(n, sizeof *v);
	unsigned h = 0;

	if (!v)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		v[i].key = fmt_mix(i);
		snprintf(v[i].name, sizeof v[i].name, "fmt-%u", i);
	}
	qsort(v, n, sizeof *v, fmt_cmp);
	for (unsigned i = 0; i < n; i++)
		h = h * 31 + v[i].key + (unsigned)strlen(v[i].name);
	free(v);
	return h;
}
