/* The option tables: parsing, defaults, ranges, booleans, --help and the Markdown table. */
#include "testutil.h"

#include "opttab.h"

#include <stdio.h>
#include <stdlib.h>

struct o {
	char name[8];
	char dir[32];
	int n;
	double t;
	size_t bytes;
	bool flag;
};

static const struct opt rows[] = {
	{ .flag = "name", .key = "name", .kind = OPT_STR, OPT_AT(struct o, name), .def = "x", .arg = "NAME", .help = "a | b" },
	{ .flag = "dir", .kind = OPT_PATH, OPT_AT(struct o, dir), .arg = "DIR", .help = "a directory" },
	{ .flag = "n", .letter = 'n', .kind = OPT_INT, OPT_AT(struct o, n), .def = "3", .arg = "N", .lo = 0, .hi = 10,
	  .zero = "off", .help = "a count" },
	{ .flag = "t", .kind = OPT_DOUBLE, OPT_AT(struct o, t), .def = "1.5", .arg = "S", .lo = 0.5, .hi = 2, .help = "time" },
	{ .flag = "bytes", .kind = OPT_SIZE, OPT_AT(struct o, bytes), .def = "1Ki", .arg = "B", .lo = 1024,
	  .hi = 1048576, .help = "size" },
	{ .flag = "flag", .kind = OPT_BOOL, OPT_AT(struct o, flag), .help = "a switch" },
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

static int run(struct o *o, int argc, const char **argv, const char **pos, int *npos, char *err)
{
	memset(o, 0, sizeof(*o));
	assert_int_equal(opt_defaults(rows, NROWS, o, err, 256), 0);
	return opt_parse(rows, NROWS, o, argc, (char **)argv, pos, 1, npos, err, 256);
}

static void test_parse(void **state)
{
	(void)state;
	struct o o;
	char err[256];
	const char *pos[1];
	int npos;
	const char *a[] = { "p", "cmd", "--n=0", "--t", "2", "--bytes", "4Ki", "--flag", "false", "--dir", "/d" };
	assert_int_equal(run(&o, 11, a, pos, &npos, err), OPT_OK);
	assert_int_equal(npos, 1);
	assert_string_equal(pos[0], "cmd");
	assert_string_equal(o.name, "x");
	assert_int_equal(o.n, 0);
	assert_true(o.t == 2);
	assert_int_equal(o.bytes, 4096);
	assert_false(o.flag);
	assert_string_equal(o.dir, "/d");
	const char *c[] = { "p", "-n", "7" };
	assert_int_equal(run(&o, 3, c, pos, &npos, err), OPT_OK);
	assert_int_equal(o.n, 7);
	const char *b[] = { "p", "--flag", "cmd" };
	assert_int_equal(run(&o, 3, b, pos, &npos, err), OPT_OK);
	assert_true(o.flag);
	assert_string_equal(pos[0], "cmd");
}

static void bad(const char *const *argv, int argc, const char *want)
{
	struct o o;
	char err[256];
	const char *pos[1];
	int npos;
	assert_int_equal(run(&o, argc, (const char **)argv, pos, &npos, err), -1);
	if (!strstr(err, want))
		fail_msg("got '%s', want '%s'", err, want);
}

static void test_errors(void **state)
{
	(void)state;
	const char *a1[] = { "p", "--n", "11" };
	bad(a1, 3, "--n: '11' is not a number in 0..10");
	const char *a2[] = { "p", "--t", "0.1" };
	bad(a2, 3, "--t: '0.1' is not a number in 0.5..2");
	const char *a3[] = { "p", "--bytes", "12" };
	bad(a3, 3, "--bytes: '12' is not a size between 1Ki and 1Mi");
	const char *a4[] = { "p", "--dir", "rel" };
	bad(a4, 3, "--dir: 'rel' is not an absolute path");
	const char *a5[] = { "p", "--name", "toolongname" };
	bad(a5, 3, "--name: longer than 7 characters");
	const char *a6[] = { "p", "--flag=maybe" };
	bad(a6, 2, "--flag: 'maybe' is not true or false");
	const char *a7[] = { "p", "--what" };
	bad(a7, 2, "unknown flag '--what'");
	const char *a8[] = { "p", "a", "b" };
	bad(a8, 3, "unexpected argument 'b'");
	const char *a9[] = { "p", "--n" };
	bad(a9, 2, "--n needs N");
}

static void test_help(void **state)
{
	(void)state;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	opt_usage(f, rows, NROWS);
	opt_markdown(f, rows, NROWS);
	fclose(f);
	assert_non_null(strstr(text, "  -n, --n N\n        a count (default 3; 0: off)\n"));
	assert_non_null(strstr(text, "a | b (default x) [name]"));
	assert_non_null(strstr(text, "| `--name NAME` | `name` | `x` | a \\| b |\n"));
	assert_non_null(strstr(text, "| `-n`, `--n N` |  | `3` | a count; 0: off |\n"));
	assert_non_null(strstr(text, "| `--flag` |  | `false` | a switch |\n"));
	free(text);
	struct o o;
	char err[256];
	const char *pos[1];
	int npos;
	const char *h[] = { "p", "--n", "5", "-h" };
	assert_int_equal(run(&o, 4, h, pos, &npos, err), OPT_HELP);
	const char *m[] = { "p", "--help=markdown" };
	assert_int_equal(run(&o, 2, m, pos, &npos, err), OPT_HELP_MARKDOWN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_help),
	};
	return cmocka_run_group_tests_name("opttab", tests, NULL, NULL);
}
