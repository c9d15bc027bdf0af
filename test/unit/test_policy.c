/* The server's node policies (binpack, spread, topology) and the 0..10 scaling. */
#include "testutil.h"

#include "policy.h"

#include <stdio.h>

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

/*
 * A node's counts (fit_whole) answer a plain claim of whole GPUs as the full
 * fit and rating do, over random nodes: devices held whole, shared, outside
 * the scheduler, unhealthy, MIG instances, islands. Fits exactly when the
 * fit does; where the counts rate (binpack, spread on nodes of whole use),
 * the same score to the bit; which claims they apply to.
 */
static void test_counts_answer_as_the_fit(void **state)
{
	(void)state;
	srand(11);
	int rated = 0, fits = 0, not_exact = 0;
	for (int round = 0; round < 3000; round++) {
		int ndev = 1 + rand() % 8;
		struct gpu_node *n = tu_node("n", ndev, GPU_VENDOR_NVIDIA, "H100", 81920);
		if (rand() % 2)
			tu_island(n, "nvlink-0", 900, 0, (ndev - 1) / 2);
		for (int i = 0; i < ndev; i++) {
			struct gpu_device *d = &n->dev[i];
			switch (rand() % 8) {
			case 0: gpu_hold(d, false, 0, 0); break;                          /* held whole */
			case 1: gpu_hold(d, true, 1024u * (1 + rand() % 40), 100u * (rand() % 11)); break;
			case 2: d->external = true; break;
			case 3: d->health = GPU_UNHEALTHY; break;
			case 4: d->mig = true; break;
			default: break;                                                  /* idle */
			}
		}
		struct fit_whole w;
		fit_whole_count(n, &w);
		not_exact += !w.exact;
		for (int count = 1; count <= 8; count++) {
			struct claim c = tu_whole(count);
			c.topo = (enum topo_mode)(rand() % 3 == 0 ? TOPO_IGNORE : TOPO_PREFERRED);
			assert_true(fit_whole_applies(&c));
			bool ok = fit_possible(n, &c);
			assert_int_equal(w.free >= count, ok);
			fits += ok;
			const enum policy_id ids[] = { POLICY_BINPACK, POLICY_SPREAD, POLICY_TOPOLOGY };
			for (size_t p = 0; p < 3; p++) {
				struct policy_ctx ctx = { .id = ids[p] };
				struct fit f;
				double want = 0, got = 0;
				bool placed = policy_place(&ctx, n, &c, &f, &want);
				bool by_counts = policy_rate_whole(ids[p], &w, &c, &got);
				assert_int_equal(placed, ok);
				if (ids[p] == POLICY_TOPOLOGY || !w.exact || !ok) {
					assert_false(by_counts);
					continue;
				}
				assert_true(by_counts);
				assert_memory_equal(&got, &want, sizeof(got));
				rated++;
			}
		}
		gpu_node_free(n);
	}
	assert_true(rated > 1000 && fits > 1000 && not_exact > 300);   /* every case came up */
	/* Claims the counts do not answer. */
	struct claim c = tu_whole(2);
	c.topo = TOPO_REQUIRED;
	assert_false(fit_whole_applies(&c));
	c = tu_whole(1);
	c.topo = TOPO_REQUIRED;
	assert_true(fit_whole_applies(&c));   /* one device is on one island anyway */
	c = tu_whole(1);
	c.vendor = GPU_VENDOR_AMD;
	assert_false(fit_whole_applies(&c));
	c = tu_whole(1);
	c.min_mem_mib = 1;
	assert_false(fit_whole_applies(&c));
	c = tu_whole(1);
	snprintf(c.models, sizeof(c.models), "H100");
	assert_false(fit_whole_applies(&c));
	c = tu_whole(1);
	assert_int_equal(claim_add_match(&c, "pool", "a"), 0);
	assert_false(fit_whole_applies(&c));
	claim_release(&c);
	c = tu_shared(1024, 100);
	assert_false(fit_whole_applies(&c));
	c = tu_whole(0);
	assert_false(fit_whole_applies(&c));
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
		cmocka_unit_test(test_counts_answer_as_the_fit),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_scale),
	};
	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
