/*
 * The /metrics text format's label values (metrics_quote): escapes as the
 * Prometheus exposition format wants them, the rest copied as is. The page
 * made a part at a time (metrics_render_part, as a scrape streams it) is
 * the whole page: each family's header once, every node's series once.
 */
#include "testutil.h"

#include "buf.h"
#include "metrics.h"

#include <stdio.h>

static void quoted(const char *in, const char *want)
{
	struct buf b;
	buf_init(&b, 1 << 10);
	buf_adds(&b, "x=");
	metrics_quote(&b, in);
	assert_string_equal(buf_cstr(&b), want);
	buf_release(&b);
}

static void test_quote_escapes_backslash_quote_and_newline(void **state)
{
	(void)state;
	quoted("node-00001", "x=\"node-00001\"");
	quoted("", "x=\"\"");
	quoted("a\"b\\c\nd", "x=\"a\\\"b\\\\c\\nd\"");
	quoted("\"\\\n", "x=\"\\\"\\\\\\n\"");
	quoted("ends with a quote\"", "x=\"ends with a quote\\\"\"");
	quoted("NVIDIA H100 80GB HBM3 \xc3\xa9", "x=\"NVIDIA H100 80GB HBM3 \xc3\xa9\"");
}

/* 25 nodes, 10 a part. */
static bool fake_nodes(void *ctx, const struct metric_family *f, size_t *pos, struct buf *out)
{
	int *calls = ctx;
	(*calls)++;
	for (size_t end = *pos + 10; *pos < 25 && *pos < end; (*pos)++)
		buf_printf(out, "%s{node=\"n%zu\"} 1\n", f->name, *pos);
	return *pos < 25;
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static void test_page_in_parts_is_the_whole_page(void **state)
{
	(void)state;
	int calls = 0;
	struct metrics_gauges g = { .cache_nodes = 25, .per_node = fake_nodes, .ctx = &calls };
	struct buf whole, parts;
	buf_init(&whole, 1 << 20);
	buf_init(&parts, 1 << 20);
	metrics_render(&whole, &g);
	assert_int_equal(calls, 6);   /* two per-node families, three parts each */
	struct metrics_cursor c = { 0 };
	int n = 0;
	while (metrics_render_part(&parts, &g, &c))
		n++;
	assert_false(metrics_render_part(&parts, &g, &c));   /* done stays done */
	assert_string_equal(buf_cstr(&parts), buf_cstr(&whole));
	int nfam;
	const struct metric_family *fam = metrics_families(&nfam);
	assert_int_equal(n, nfam + 2 * 2);   /* each family a part, the per-node ones two more */
	for (int i = 0; i < nfam; i++) {
		char help[160];
		snprintf(help, sizeof(help), "# HELP %s ", fam[i].name);
		assert_int_equal(count_of(buf_cstr(&whole), help), 1);
	}
	assert_int_equal(count_of(buf_cstr(&whole), "gpu_extender_node_gpus{node=\"n24\"} 1\n"), 1);
	assert_int_equal(count_of(buf_cstr(&whole), "gpu_extender_node_fragmentation_ratio{node=\"n0\"} 1\n"), 1);
	assert_int_equal(count_of(buf_cstr(&whole), "{node=\"n"), 50);
	buf_release(&whole);
	buf_release(&parts);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quote_escapes_backslash_quote_and_newline),
		cmocka_unit_test(test_page_in_parts_is_the_whole_page),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
