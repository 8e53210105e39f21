/* The multi-file project default_path.rs builds with `make -j2` under ptscope. */
unsigned hash_run(unsigned n);
unsigned sort_run(unsigned n);
unsigned fmt_run(unsigned n);
unsigned parse_run(unsigned n);
unsigned vec_run(unsigned n);
unsigned tree_run(unsigned n);
