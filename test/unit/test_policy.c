/* The server's node policies (binpack, spread, topology) and the 0..10 scaling. */
#include "testutil.h"

#include "policy.h"

static double rate(enum policy_id id, const struct gpu_node *n, const struct claim *c)
{
	struct policy_ctx ctx = { .id = id, .wl = NULL, .seed = 1 };
	struct fit f;
	double score = -1;
	assert_true(policy_place(&ctx, n, c, &f, &score));
	return score;
}

static void test_binpack_prefers_fuller_nodes(void **state)
{
	(void)state;
	struct gpu_node *empty = tu_node("empty", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	struct gpu_node *half = tu_node("half", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	for (int i = 0; i < 4; i++)
		half->dev[i].exclusive = 1;
	struct claim c = tu_whole(2);
	assert_true(rate(POLICY_BINPACK, half, &c) > rate(POLICY_BINPACK, empty, &c));
	assert_true(rate(POLICY_SPREAD, empty, &c) > rate(POLICY_SPREAD, half, &c));
	/* A claim that fills a small node exactly beats a big empty node. */
	struct gpu_node *pair = tu_node("pair", 2, GPU_VENDOR_NVIDIA, "H100", 81559);
	assert_true(rate(POLICY_BINPACK, pair, &c) > rate(POLICY_BINPACK, half, &c));
	gpu_node_free(empty);
	gpu_node_free(half);
	gpu_node_free(pair);
}

static void test_binpack_counts_shares(void **state)
{
	(void)state;
	struct gpu_node *a = tu_node("a", 2, GPU_VENDOR_NVIDIA, "A10", 24576);
	struct gpu_node *b = tu_node("b", 2, GPU_VENDOR_NVIDIA, "A10", 24576);
	b->dev[0].shared = 1;
	b->dev[0].used_core = 500;
	b->dev[0].used_mib = 4096;
	struct claim c = tu_shared(4096, 250);
	assert_true(rate(POLICY_BINPACK, b, &c) > rate(POLICY_BINPACK, a, &c));
	assert_true(rate(POLICY_SPREAD, a, &c) > rate(POLICY_SPREAD, b, &c));
	gpu_node_free(a);
	gpu_node_free(b);
}

static void test_topology_prefers_one_fast_island(void **state)
{
	(void)state;
	/* split: 3 free over two islands (1 + 2); whole: 4 free on one island. */
	struct gpu_node *split = tu_node("split", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	tu_island(split, "nv0", 900, 0, 3);
	tu_island(split, "nv1", 900, 4, 7);
	split->dev[0].exclusive = split->dev[1].exclusive = split->dev[2].exclusive = 1;
	split->dev[4].exclusive = split->dev[5].exclusive = 1;
	struct gpu_node *whole = tu_node("whole", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	tu_island(whole, "nv0", 900, 0, 3);
	tu_island(whole, "nv1", 900, 4, 7);
	for (int i = 4; i < 8; i++)
		whole->dev[i].exclusive = 1;
	struct gpu_node *slow = tu_node("slow", 4, GPU_VENDOR_NVIDIA, "H100", 81559);
	tu_island(slow, "pcie", 32, 0, 3);
	struct claim c = tu_whole(3);
	double s_split = rate(POLICY_TOPOLOGY, split, &c), s_whole = rate(POLICY_TOPOLOGY, whole, &c);
	double s_slow = rate(POLICY_TOPOLOGY, slow, &c);
	assert_true(s_whole > s_split);   /* one island beats two */
	assert_true(s_whole > s_slow);    /* a fast island beats a slow one */
	/* binpack alone would pick the fuller split node: the policies really differ. */
	assert_true(rate(POLICY_BINPACK, split, &c) > rate(POLICY_BINPACK, whole, &c));
	gpu_node_free(split);
	gpu_node_free(whole);
	gpu_node_free(slow);
}

static void test_place_refuses_what_does_not_fit(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 1, GPU_VENDOR_NVIDIA, "T4", 15360);
	struct claim c = tu_whole(2);
	struct policy_ctx ctx = { .id = POLICY_BINPACK };
	struct fit f;
	double score;
	for (int id = 0; id < POLICY_COUNT; id++) {
		ctx.id = (enum policy_id)id;
		assert_false(policy_place(&ctx, n, &c, &f, &score));
		assert_true(f.reason[0] != '\0');
	}
	gpu_node_free(n);
}

static void test_names(void **state)
{
	(void)state;
	enum policy_id id;
	for (int i = 0; i < POLICY_COUNT; i++) {
		assert_true(policy_parse(policy_name((enum policy_id)i), &id));
		assert_int_equal(id, i);
	}
	assert_true(policy_parse("BinPack", &id) && id == POLICY_BINPACK);
	assert_false(policy_parse("fastest", &id));
}

static void test_scale(void **state)
{
	(void)state;
	double raw[6] = { 0.0, 1.0, 0.5, 99, 0.0, 0.999 };
	bool ok[6] = { true, true, true, false, true, true };
	int64_t out[6];
	policy_scale(raw, ok, 6, out);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 10);
	assert_int_equal(out[2], 5);
	assert_int_equal(out[3], 0);    /* does not fit: 0, and it does not stretch the range */
	assert_int_equal(out[4], 0);
	assert_int_equal(out[5], 9);    /* a close second stays second */
	double same[2] = { 3, 3 };
	bool both[2] = { true, true };
	policy_scale(same, both, 2, out);
	assert_int_equal(out[0], 10);
	assert_int_equal(out[1], 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_binpack_prefers_fuller_nodes),
		cmocka_unit_test(test_binpack_counts_shares),
		cmocka_unit_test(test_topology_prefers_one_fast_island),
		cmocka_unit_test(test_place_refuses_what_does_not_fit),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_scale),
	};
	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
