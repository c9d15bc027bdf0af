/*
 * The gang planner: all members or none, inside the tightest topology
 * domain that holds the gang, on as few nodes as possible.
 */
#include "testutil.h"

#include "gang.h"

#include <stdio.h>

#define ZONE "topology.kubernetes.io/zone"

static struct gpu_node *zone_node(const char *name, int ndev, const char *zone)
{
	struct gpu_node *n = tu_node(name, ndev, GPU_VENDOR_NVIDIA, "H100", 81559);
	if (zone)
		assert_int_equal(gpu_node_set_label(n, ZONE, zone), 0);
	return n;
}

static void free_nodes(struct gpu_node **n, int k)
{
	for (int i = 0; i < k; i++)
		gpu_node_free(n[i]);
}

/* The nodes of the plan's slots, as "n0,n0,n2". */
static void slot_nodes(const struct gang_plan *p, struct gpu_node *const *nodes, char *out, size_t size)
{
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < p->nslots; i++)
		len += (size_t)snprintf(out + len, size - len, "%s%s", i ? "," : "", nodes[p->slots[i].node]->name);
}

static void test_tightest_zone_that_holds_the_gang(void **state)
{
	(void)state;
	/* Zone a: three 8-GPU nodes; zone b: two. A gang of 2×8 fits both: b is the tighter. */
	struct gpu_node *n[5] = {
		zone_node("a1", 8, "a"), zone_node("a2", 8, "a"), zone_node("a3", 8, "a"),
		zone_node("b1", 8, "b"), zone_node("b2", 8, "b"),
	};
	struct claim c = tu_whole(8);
	struct gang_plan p;
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 5, &c, 2, ZONE, &p), 0);
	assert_true(p.ok);
	char where[64];
	slot_nodes(&p, n, where, sizeof(where));
	assert_string_equal(where, "b1,b2");
	assert_int_equal(p.domains, 1);
	assert_int_equal(p.nodes, 2);
	assert_int_equal(p.slots[0].fit.ndev, 8);
	gang_plan_release(&p);
	/* 3×8: only zone a holds it whole. */
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 5, &c, 3, ZONE, &p), 0);
	assert_true(p.ok);
	slot_nodes(&p, n, where, sizeof(where));
	assert_string_equal(where, "a1,a2,a3");
	gang_plan_release(&p);
	/* 4×8: no zone holds it: the largest zone first, then the next. */
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 5, &c, 4, ZONE, &p), 0);
	assert_true(p.ok);
	slot_nodes(&p, n, where, sizeof(where));
	assert_string_equal(where, "a1,a2,a3,b1");
	assert_int_equal(p.domains, 2);
	gang_plan_release(&p);
	free_nodes(n, 5);
}

static void test_fewest_nodes_and_disjoint_devices(void **state)
{
	(void)state;
	/* 4×2 GPUs: one 8-GPU node holds all four, rather than spreading over the 4-GPU ones. */
	struct gpu_node *n[3] = { zone_node("small1", 4, NULL), zone_node("big", 8, NULL), zone_node("small2", 4, NULL) };
	struct claim c = tu_whole(2);
	struct gang_plan p;
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 3, &c, 4, ZONE, &p), 0);
	assert_true(p.ok);
	assert_int_equal(p.nodes, 1);
	bool used[8] = { false };
	for (int i = 0; i < 4; i++) {
		assert_int_equal(p.slots[i].node, 1);
		for (int d = 0; d < p.slots[i].fit.ndev; d++) {
			assert_false(used[p.slots[i].fit.dev[d]]);   /* no device in two slots */
			used[p.slots[i].fit.dev[d]] = true;
		}
	}
	gang_plan_release(&p);
	free_nodes(n, 3);
}

static void test_fullest_of_equal_nodes_first(void **state)
{
	(void)state;
	/* Both nodes have room for one 4-GPU member: the half-used one takes it, the empty one stays whole. */
	struct gpu_node *n[2] = { zone_node("empty", 8, NULL), zone_node("half", 8, NULL) };
	struct claim c = tu_whole(4);
	struct fit f;
	assert_true(fit_node(n[1], &c, PACK_BINPACK, &f));
	fit_apply(n[1], &c, &f);
	struct gang_plan p;
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 2, &c, 1, ZONE, &p), 0);
	assert_true(p.ok);
	assert_int_equal(p.slots[0].node, 1);
	gang_plan_release(&p);
	/* Two members: the empty node holds both (fewest nodes wins over fullest). */
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 2, &c, 2, ZONE, &p), 0);
	assert_true(p.ok);
	assert_int_equal(p.nodes, 1);
	assert_int_equal(p.slots[0].node, 0);
	assert_int_equal(p.slots[1].node, 0);
	gang_plan_release(&p);
	free_nodes(n, 2);
}

static void test_does_not_fit_says_how_much_room(void **state)
{
	(void)state;
	/* Two free 8-GPU nodes and one with half its GPUs taken: room for two 8-GPU members. */
	struct gpu_node *n[3] = { zone_node("a", 8, NULL), zone_node("b", 8, NULL), zone_node("c", 8, NULL) };
	struct claim half = tu_whole(4), c = tu_whole(8);
	struct fit f;
	assert_true(fit_node(n[2], &half, PACK_BINPACK, &f));
	fit_apply(n[2], &half, &f);
	struct gang_plan p;
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 3, &c, 3, ZONE, &p), 0);
	assert_false(p.ok);
	assert_int_equal(p.nslots, 0);
	assert_null(p.slots);
	assert_int_equal(p.places, 2);
	assert_string_equal(p.reason, "needs 3×8 GPUs (one pod each); room for 2 such pods");
	gang_plan_release(&p);
	free_nodes(n, 3);
}

static void test_label_selector_and_shares(void **state)
{
	(void)state;
	/* A claim's matchLabels rule nodes out; a gang of shares packs onto one GPU's worth first. */
	struct gpu_node *n[2] = { zone_node("x", 2, "a"), zone_node("y", 2, "a") };
	assert_int_equal(gpu_node_set_label(n[1], "team", "red"), 0);
	struct claim c = tu_whole(1);
	assert_int_equal(claim_add_match(&c, "team", "red"), 0);
	struct gang_plan p;
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 2, &c, 2, ZONE, &p), 0);
	assert_true(p.ok);
	assert_int_equal(p.slots[0].node, 1);
	assert_int_equal(p.slots[1].node, 1);
	gang_plan_release(&p);
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 2, &c, 3, ZONE, &p), 0);
	assert_false(p.ok);
	gang_plan_release(&p);
	claim_release(&c);
	struct claim s = tu_shared(20000, 250);
	assert_int_equal(gang_plan((const struct gpu_node *const *)n, 2, &s, 4, ZONE, &p), 0);
	assert_true(p.ok);
	assert_int_equal(p.nodes, 1);
	gang_plan_release(&p);
	free_nodes(n, 2);
}

/* A place of one node's devices ids[0..n), as a bind would read it from the ledger. */
static struct gang_place place_of(enum claim_mode mode, const int *ids, int n, uint32_t mib, uint32_t core)
{
	struct gang_place p = { .mode = mode, .ndev = n, .mem_mib = mib, .core = core };
	for (int k = 0; k < n; k++)
		p.ids[k] = ids[k];
	return p;
}

static void test_place_taken_over_only_by_a_member_it_fits(void **state)
{
	(void)state;
	struct gpu_node *n = zone_node("n", 4, "a");
	assert_int_equal(gpu_node_set_label(n, "team", "red"), 0);
	char why[256];
	/* Whole GPUs: the claim the place was made for takes it; another count does not. */
	int two[2] = { 2, 3 };
	struct gang_place p = place_of(CLAIM_EXCLUSIVE, two, 2, 0, 0);
	struct claim c = tu_whole(2);
	assert_true(gang_place_fits(n, &p, &c, why, sizeof(why)));
	struct claim four = tu_whole(4);
	assert_false(gang_place_fits(n, &p, &four, why, sizeof(why)));
	assert_string_equal(why, "places of 2 Exclusive GPUs each; this member asks 4 Exclusive GPUs");
	/* Selectors: a model the devices are not, a node label the node lacks. */
	strcpy(c.models, "A100");
	assert_false(gang_place_fits(n, &p, &c, why, sizeof(why)));
	assert_non_null(strstr(why, "do not fit this member"));
	c.models[0] = '\0';
	assert_int_equal(claim_add_match(&c, "team", "blue"), 0);
	assert_false(gang_place_fits(n, &p, &c, why, sizeof(why)));
	claim_release(&c);
	struct claim big = tu_whole(2);
	big.min_mem_mib = 100000;
	assert_false(gang_place_fits(n, &p, &big, why, sizeof(why)));
	/* Its own use does not count against it, another pod's does not matter either: only its devices. */
	struct claim one = tu_whole(1);
	struct fit f;
	assert_true(fit_node(n, &one, PACK_BINPACK, &f));
	fit_apply(n, &one, &f);
	struct claim again = tu_whole(2);
	n->dev[2].exclusive = 1;       /* as the ledger has the place itself */
	n->dev[3].exclusive = 1;
	assert_true(gang_place_fits(n, &p, &again, why, sizeof(why)));
	/* Shares: the memory and compute must be the place's, not more nor less. */
	int dev0[1] = { 0 };
	struct gang_place sp = place_of(CLAIM_SHARED, dev0, 1, 8192, 0);
	struct claim s8 = tu_shared(8192, 0), s16 = tu_shared(16384, 0);
	assert_true(gang_place_fits(n, &sp, &s8, why, sizeof(why)));
	assert_false(gang_place_fits(n, &sp, &s16, why, sizeof(why)));
	assert_string_equal(why, "places of 1 Shared GPU (8192 MiB, 0 milli-GPU on each) each; this member asks 1 Shared GPU "
				 "(16384 MiB, 0 milli-GPU on each)");
	/* A device gone from the node: no place there any more. */
	int gone[2] = { 3, 9 };
	struct gang_place gp = place_of(CLAIM_EXCLUSIVE, gone, 2, 0, 0);
	assert_false(gang_place_fits(n, &gp, &again, why, sizeof(why)));
	assert_non_null(strstr(why, "no longer all on node n"));
	gpu_node_free(n);
}

static void test_mig_place_needs_its_profile(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("m", 3, GPU_VENDOR_NVIDIA, "NVIDIA A100-SXM4-40GB", 40960);
	n->info[1].mig_profile = "3g.20gb";
	n->info[2].mig_profile = "1g.5gb";
	n->dev[1].mig = n->dev[2].mig = true;
	int inst[1] = { 2 };
	struct gang_place p = place_of(CLAIM_MIG, inst, 1, 0, 0);
	struct claim small = tu_whole(1), large = tu_whole(1), whole = tu_whole(1);
	small.mode = large.mode = CLAIM_MIG;
	strcpy(small.models, "1g.5gb");
	strcpy(large.models, "3g.20gb");
	char why[256];
	assert_true(gang_place_fits(n, &p, &small, why, sizeof(why)));
	assert_false(gang_place_fits(n, &p, &large, why, sizeof(why)));
	assert_non_null(strstr(why, "do not fit this member"));
	/* A whole GPU is no MIG instance. */
	assert_false(gang_place_fits(n, &p, &whole, why, sizeof(why)));
	assert_non_null(strstr(why, "this member asks 1 Exclusive GPU"));
	gpu_node_free(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tightest_zone_that_holds_the_gang),
		cmocka_unit_test(test_fewest_nodes_and_disjoint_devices),
		cmocka_unit_test(test_fullest_of_equal_nodes_first),
		cmocka_unit_test(test_does_not_fit_says_how_much_room),
		cmocka_unit_test(test_label_selector_and_shares),
		cmocka_unit_test(test_place_taken_over_only_by_a_member_it_fits),
		cmocka_unit_test(test_mig_place_needs_its_profile),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
