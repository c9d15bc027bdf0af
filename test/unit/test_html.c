/* The GPU page: escaping of every name, states, holders' colours, the legend and the summary. */
#include "testutil.h"

#include "html.h"

#include <stdio.h>
#include <string.h>

/* Names a user controls, each with every character HTML gives a meaning to. */
#define HOSTILE "<script>alert(1)</script>\"'&amp;"
#define HOSTILE_ESC "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;amp;"

static char *page(const struct html_page *p)
{
	struct buf out;
	buf_init(&out, (size_t)1 << 24);
	assert_int_equal(html_gpu_page(p, &out), 0);
	size_t len;
	return buf_detach(&out, &len);
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* The value of attribute attr in the first tag after `after`, copied to out. */
static void attr_after(const char *html, const char *after, const char *attr, char *out, size_t size)
{
	const char *p = strstr(html, after);
	assert_non_null(p);
	char key[64];
	snprintf(key, sizeof(key), " %s=\"", attr);
	p = strstr(p, key);
	assert_non_null(p);
	p += strlen(key);
	const char *end = strchr(p, '"');
	assert_non_null(end);
	snprintf(out, size, "%.*s", (int)(end - p), p);
}

static void test_escape(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(html_escape(&b, "a<b>c&d\"e'f"), 0);
	assert_string_equal(buf_cstr(&b), "a&lt;b&gt;c&amp;d&quot;e&#39;f");
	buf_clear(&b);
	assert_int_equal(html_escape(&b, ""), 0);
	assert_int_equal(html_escape(&b, NULL), 0);
	assert_int_equal(html_escape(&b, "plain"), 0);
	assert_string_equal(buf_cstr(&b), "plain");
	buf_release(&b);
	/* A full buffer is an error, not a cut string passed as whole. */
	buf_init(&b, 8);
	assert_int_equal(html_escape(&b, "<<<<<<<<"), -1);
	buf_release(&b);
}

/* Every string on the page is escaped: no tag, attribute or entity of a user's gets through. */
static void test_hostile_names(void **state)
{
	(void)state;
	struct html_holder h[] = {
		{ .ns = HOSTILE, .name = HOSTILE, .gang = "" },
		{ .ns = "ml", .name = HOSTILE, .gang = HOSTILE, .place = true },
		{ .ns = "ml", .name = "s", .gang = "", .shared = true, .mem_mib = 1024, .core_pct = 25 },
	};
	struct html_gpu g[] = {
		{ .id = 0, .model = HOSTILE, .island = HOSTILE, .uuid = HOSTILE, .memory_mib = 1, .nholders = 1, .holders = &h[0] },
		{ .id = 1, .model = HOSTILE, .island = HOSTILE, .uuid = "u1", .memory_mib = 1, .nholders = 2, .holders = &h[1] },
	};
	struct html_node n = { .name = HOSTILE, .ngpus = 2, .gpus = g, .note = HOSTILE };
	struct html_page p = { .title = HOSTILE, .source = HOSTILE, .nnodes = 1, .nodes = &n };
	char *s = page(&p);
	assert_null(strstr(s, "<script"));
	assert_null(strstr(s, "alert(1)\""));
	/* Only the page's own quotes: each hostile string shows escaped wherever it is written. */
	assert_null(strstr(s, "'"));
	assert_true(count(s, HOSTILE_ESC) >= 12);
	assert_non_null(strstr(s, "data-node=\"" HOSTILE_ESC "\""));
	assert_non_null(strstr(s, "data-holder=\"" HOSTILE_ESC "/" HOSTILE_ESC "\""));
	assert_non_null(strstr(s, "data-holder=\"ml/" HOSTILE_ESC " (gang place)\""));
	assert_non_null(strstr(s, "<title>" HOSTILE_ESC "</title>"));
	assert_non_null(strstr(s, "<p class=\"note\">" HOSTILE_ESC "</p>"));
	/* Self-contained: nothing fetched, no script. */
	assert_null(strstr(s, "src="));
	assert_null(strstr(s, "href="));
	assert_null(strstr(s, "url("));
	free(s);
}

/* A node: GPU 0 and 1 held by a gang (a member and a place), 2 by a pod, 3 shared by two, 4 free, 5 unhealthy, 6 used outside. */
static void test_states_and_colours(void **state)
{
	(void)state;
	struct html_holder h[] = {
		{ .ns = "ml", .name = "job-0", .gang = "job" },
		{ .ns = "ml", .name = "job", .gang = "job", .place = true },
		{ .ns = "ml", .name = "train", .gang = "" },
		{ .ns = "ml", .name = "infer", .gang = "", .shared = true, .mem_mib = 8192, .core_pct = 30 },
		{ .ns = "team-b", .name = "infer", .gang = "", .shared = true, .mem_mib = 4096, .core_pct = 20 },
		{ .name = "other", .gang = "", .missing = false },
	};
	struct html_gpu g[] = {
		{ .id = 0, .model = "H100", .island = "nvlink-0", .uuid = "", .memory_mib = 81559, .nholders = 1, .holders = &h[0] },
		{ .id = 1, .model = "H100", .island = "nvlink-0", .uuid = "", .memory_mib = 81559, .nholders = 1, .holders = &h[1] },
		{ .id = 2, .model = "H100", .island = "nvlink-1", .uuid = "", .memory_mib = 81559, .nholders = 1, .holders = &h[2] },
		{ .id = 3, .model = "H100", .island = "nvlink-1", .uuid = "", .memory_mib = 81559, .nholders = 2, .holders = &h[3] },
		{ .id = 4, .model = "H100", .island = "nvlink-0", .uuid = "", .memory_mib = 81559 },
		{ .id = 5, .model = "H100", .island = "nvlink-0", .uuid = "", .memory_mib = 81559, .state = HTML_GPU_UNHEALTHY },
		{ .id = 6, .model = "A100", .island = "", .uuid = "", .memory_mib = 40960, .state = HTML_GPU_EXTERNAL },
	};
	struct html_gpu g2[] = {
		{ .id = 0, .model = "T4", .island = "", .uuid = "", .memory_mib = 15360, .nholders = 1, .holders = &h[5] },
	};
	struct html_node n[] = { { .name = "k1", .ngpus = 7, .gpus = g }, { .name = "k2", .ngpus = 1, .gpus = g2 } };
	struct html_page p = { .nnodes = 2, .nodes = n, .hidden = 3 };
	char *s = page(&p);
	const char *states[] = { "held", "held", "held", "shared", "free", "unhealthy", "external" };
	for (int i = 0; i < 7; i++) {
		char at[64], got[32];
		snprintf(at, sizeof(at), "data-node=\"k1\"");
		const char *node = strstr(s, at);
		snprintf(at, sizeof(at), "data-device=\"%d\"", i);
		attr_after(node, at, "data-state", got, sizeof(got));
		assert_string_equal(got, states[i]);
	}
	/* Per model and size. */
	assert_non_null(strstr(s, "6 &times; H100 (81559 MiB); 1 &times; A100 (40960 MiB)"));
	/* The gang's member and place share a colour, the legend's for ml/job; train and the shares have their own. */
	char member[32], place[32], legend[32], train[32], infer[32], infer_b[32], other[32];
	attr_after(s, "data-holder=\"ml/job-0\"", "style", member, sizeof(member));
	attr_after(s, "data-holder=\"ml/job (gang place)\"", "style", place, sizeof(place));
	attr_after(s, "<li data-group=\"ml/job\"", "data-color", legend, sizeof(legend));
	attr_after(s, "data-holder=\"ml/train\"", "style", train, sizeof(train));
	attr_after(s, "data-holder=\"ml/infer\"", "style", infer, sizeof(infer));
	attr_after(s, "data-holder=\"team-b/infer\"", "style", infer_b, sizeof(infer_b));
	attr_after(s, "data-holder=\"other\"", "style", other, sizeof(other));
	assert_string_equal(member, place);
	assert_string_equal(member + strlen("background:"), legend);
	const char *all[] = { member, train, infer, infer_b, other };
	for (int i = 0; i < 5; i++)
		for (int k = i + 1; k < 5; k++)
			assert_string_not_equal(all[i], all[k]);
	/* A cell held whole takes its holder's colour. */
	char cell[32];
	attr_after(s, "data-device=\"2\"", "style", cell, sizeof(cell));
	assert_string_equal(cell, train);
	assert_non_null(strstr(s, ">ml/infer 8192 MiB, 30%<"));
	assert_non_null(strstr(s, "<li data-group=\"ml/job\" data-color=\"hsl("));
	assert_non_null(strstr(s, "ml/job <i>gang</i></li>"));
	assert_non_null(strstr(s, "ml/train <i>pod</i></li>"));
	/* One legend entry per group: 5 groups and the 3 states. */
	assert_int_equal(count(s, "<li data-group="), 8);
	assert_non_null(strstr(s, "2 nodes, 8 GPUs: 1 free, 4 held whole, 1 shared, 1 unhealthy, 1 used outside; "
				  "3 nodes without GPUs not shown"));
	/* Islands in the order the devices name them; GPU 4 drawn with nvlink-0's. */
	const char *i0 = strstr(s, ">nvlink-0<"), *i1 = strstr(s, ">nvlink-1<"), *d4 = strstr(s, "data-device=\"4\"");
	assert_true(i0 && i1 && d4 && i0 < d4 && d4 < i1);
	free(s);
}

static void test_empty(void **state)
{
	(void)state;
	struct html_page p = { .title = NULL };
	char *s = page(&p);
	assert_non_null(strstr(s, "<title>GPUs</title>"));
	assert_non_null(strstr(s, "0 nodes, 0 GPUs"));
	assert_non_null(strstr(s, "</html>"));
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_hostile_names),
		cmocka_unit_test(test_states_and_colours),
		cmocka_unit_test(test_empty),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
