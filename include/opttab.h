/*
 * opttab: a command line (and a settings file) described by a table, one
 * row per option: its --flag, its settings-file key, what it sets, its
 * default, its help, and what 0 means. gpu-extender serve and gpu-agent
 * parse with it, and their --help and --help=markdown (the tables in
 * docs/configuration.md) are printed from the same rows.
 *
 * Flags: --name VALUE, --name=VALUE; a boolean alone is true, and takes
 * true or false as --name=false or --name false. Rows point into one
 * struct (the base) by offset.
 */
#ifndef GPU_OPTTAB_H
#define GPU_OPTTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum opt_kind {
	OPT_STR,      /* char[size] */
	OPT_PATH,     /* char[size], an absolute path */
	OPT_INT,      /* int in [lo, hi] */
	OPT_DOUBLE,   /* double in [lo, hi] */
	OPT_SIZE,     /* size_t, bytes with Ki/Mi/Gi suffixes, in [lo, hi] */
	OPT_BOOL,     /* bool */
	OPT_FUNC,     /* set() decides */
};

struct opt;
/* Sets the row's target from value; -1 with err (which names label, the flag or key). */
typedef int (*opt_setter)(void *base, const struct opt *o, const char *value, const char *label,
			  char *err, size_t errlen);

struct opt {
	const char *flag;     /* without the leading "--" */
	const char *key;      /* settings-file key (dotted), NULL: a flag only */
	enum opt_kind kind;
	size_t offset, size;  /* target in the base struct; size of strings */
	const char *def;      /* default, as it would be given; NULL: none (zero, empty) */
	const char *arg;      /* the value's name in --help (NULL for booleans) */
	const char *help;
	double lo, hi;        /* range of numbers */
	const char *zero;     /* numbers whose range holds 0: what 0 means */
	opt_setter set;       /* OPT_FUNC */
	const char *which;    /* passed to set() through the row */
	const char *shown;    /* the default as --help shows it, where def is not it */
	char letter;          /* also -LETTER VALUE (0: none) */
};

/* The row's target: .offset and .size of a member of type. */
#define OPT_AT(type, field) .offset = offsetof(type, field), .size = sizeof(((type *)0)->field)

/* Every row's default into base (zeroed first by the caller); -1 with err if a default is bad. */
int opt_defaults(const struct opt *t, size_t n, void *base, char *err, size_t errlen);
/* One value into its row's target; label names it in err ("--listen", "tls.certFile"). */
int opt_set(const struct opt *o, void *base, const char *value, const char *label, char *err, size_t errlen);
const struct opt *opt_find_flag(const struct opt *t, size_t n, const char *name, size_t len);
const struct opt *opt_find_key(const struct opt *t, size_t n, const char *key);

enum { OPT_OK = 0, OPT_HELP = 1, OPT_HELP_MARKDOWN = 2 };
/*
 * Applies argv[1..argc) to base, in order. Words that are not flags go to
 * pos (at most maxpos, counted in *npos; more is an error). Returns OPT_OK,
 * OPT_HELP for -h/--help, OPT_HELP_MARKDOWN for --help=markdown, or -1
 * with err.
 */
int opt_parse(const struct opt *t, size_t n, void *base, int argc, char **argv, const char **pos, int maxpos,
	      int *npos, char *err, size_t errlen);

/* --help lines: "  --flag ARG\n        help (default D; 0: Z) [key]". */
void opt_usage(FILE *out, const struct opt *t, size_t n);
/* The same rows as a Markdown table (flag, key, default, meaning). */
void opt_markdown(FILE *out, const struct opt *t, size_t n);

#endif
