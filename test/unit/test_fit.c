/* Feasibility, device choice and rejection reasons of the scoring core. */
#include "testutil.h"

#include "fit.h"

#include <stdio.h>
#include <stdlib.h>

static void test_no_gpu_claim_fits_everywhere(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 0, GPU_VENDOR_NVIDIA, "", 0);
	struct claim c;
	claim_init(&c);
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(f.ndev, 0);
	gpu_node_free(n);
}

static void test_node_without_gpus(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 0, GPU_VENDOR_NVIDIA, "", 0);
	struct claim c = tu_whole(1);
	struct fit f;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	assert_string_equal(f.reason, "node has no GPUs");
	gpu_node_free(n);
}

static void test_exclusive_takes_lowest_free(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 4, GPU_VENDOR_NVIDIA, "NVIDIA H100 80GB HBM3", 81559);
	n->dev[0].exclusive = 1;
	struct claim c = tu_whole(2);
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	char ids[32];
	fit_ids(n, &f, ids, sizeof(ids));
	assert_string_equal(ids, "1,2");
	gpu_node_free(n);
}

static void test_busy_reason_is_resolvable(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	for (int i = 0; i < 5; i++)
		n->dev[i].exclusive = 1;
	struct claim c = tu_whole(4);
	struct fit f;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_false(f.unresolvable);
	assert_string_equal(f.reason, "gpu 0-7: 3 free, claim needs 4");
	gpu_node_free(n);
}

static void test_unhealthy_devices_are_skipped(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 4, GPU_VENDOR_NVIDIA, "A100", 40960);
	n->dev[0].health = GPU_UNHEALTHY;
	n->dev[1].health = GPU_HEALTH_UNKNOWN;
	struct claim c = tu_whole(2);
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(n->dev[f.dev[0]].id, 2);
	assert_int_equal(n->dev[f.dev[1]].id, 3);
	c.count = 3;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	assert_non_null(strstr(f.reason, "2 of 4 matching GPUs usable"));
	gpu_node_free(n);
}

static void test_external_use_is_respected(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 2, GPU_VENDOR_NVIDIA, "A100", 40960);
	n->dev[1].external = true;
	struct claim c = tu_whole(1);
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(f.dev[0], 0);
	n->dev[0].exclusive = 1;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	gpu_node_free(n);
}

static void test_vendor_mismatch_unresolvable(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 8, GPU_VENDOR_AMD, "AMD Instinct MI300X", 196608);
	struct claim c = tu_whole(1);
	c.vendor = GPU_VENDOR_NVIDIA;
	struct fit f;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	assert_string_equal(f.reason, "no nvidia GPU (node has 8 amd)");
	gpu_node_free(n);
}

static void test_mixed_vendors_pick_the_asked_one(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 2, GPU_VENDOR_NVIDIA, "L40S", 46068);
	struct gpu_device d = n->dev[0];
	struct gpu_device_info in = n->info[0];
	d.id = 2;
	d.vendor = GPU_VENDOR_AMD;
	in.model = "AMD Instinct MI210";
	in.arch = "gfx90a";
	assert_int_equal(gpu_node_add_device(n, &d, &in), 0);
	struct claim c = tu_whole(1);
	c.vendor = GPU_VENDOR_AMD;
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(n->dev[f.dev[0]].id, 2);
	strcpy(c.arch, "gfx942");
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	assert_non_null(strstr(f.reason, "architecture gfx942"));
	gpu_node_free(n);
}

static void test_model_and_memory_selectors(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 2, GPU_VENDOR_NVIDIA, "NVIDIA A100-SXM4-40GB", 40960);
	struct claim c = tu_whole(1);
	strcpy(c.models, "H100|A100");
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	strcpy(c.models, "A10");       /* a word, not a prefix of A100 */
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	assert_non_null(strstr(f.reason, "no GPU of model A10"));
	c.models[0] = '\0';
	c.min_mem_mib = 81920;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_string_equal(f.reason, "GPUs have 40960 MiB, claim needs >= 81920 MiB each");
	gpu_node_free(n);
}

static void test_label_selector(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 1, GPU_VENDOR_NVIDIA, "T4", 15360);
	assert_int_equal(gpu_node_set_label(n, "zone", "a"), 0);
	struct claim c = tu_whole(1);
	assert_int_equal(claim_add_match(&c, "zone", "b"), 0);
	struct fit f;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	assert_string_equal(f.reason, "node label zone=a, claim wants b");
	claim_release(&c);
	c = tu_whole(1);
	assert_int_equal(claim_add_match(&c, "zone", "a"), 0);
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	claim_release(&c);
	gpu_node_free(n);
}

static struct gpu_node *two_islands(void)
{
	struct gpu_node *n = tu_node("n", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	tu_island(n, "nvlink-0", 900, 0, 3);
	tu_island(n, "nvlink-1", 900, 4, 7);
	return n;
}

static void test_topology_required_reason(void **state)
{
	(void)state;
	struct gpu_node *n = two_islands();
	n->dev[0].exclusive = n->dev[1].exclusive = 1;      /* nvlink-0: 2 free */
	n->dev[4].exclusive = 1;                            /* nvlink-1: 3 free */
	struct claim c = tu_whole(4);
	c.topo = TOPO_REQUIRED;
	struct fit f;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_false(f.unresolvable);
	assert_string_equal(f.reason, "5 free GPUs but no island has 4 (nvlink-0: 2, nvlink-1: 3)");
	/* Preferred falls back to any four, spanning as few islands as it can. */
	c.topo = TOPO_PREFERRED;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	int on1 = 0;
	for (int k = 0; k < f.ndev; k++)
		on1 += n->dev[f.dev[k]].island == 1;
	assert_int_equal(on1, 3);
	gpu_node_free(n);
}

static void test_topology_required_bandwidth(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 4, GPU_VENDOR_NVIDIA, "A100", 40960);
	tu_island(n, "pcie-0", 32, 0, 1);
	tu_island(n, "nvlink-0", 600, 2, 3);
	struct claim c = tu_whole(2);
	c.topo = TOPO_REQUIRED;
	c.min_bw_gbps = 300;
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(n->dev[f.dev[0]].id, 2);
	c.count = 3;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	assert_string_equal(f.reason, "no island of >= 300 GB/s has 3 GPUs (nvlink-0: 2)");
	gpu_node_free(n);
}

static void test_whole_claims_keep_big_islands_whole(void **state)
{
	(void)state;
	struct gpu_node *n = two_islands();
	n->dev[5].exclusive = 1;            /* nvlink-1 has 3 free, nvlink-0 has 4 */
	struct claim c = tu_whole(1);
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(n->dev[f.dev[0]].island, 1);
	c.count = 2;
	c.topo = TOPO_REQUIRED;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(n->dev[f.dev[0]].island, 1);   /* best fit: the smaller island */
	gpu_node_free(n);
}

static void test_prefer_ids_and_contiguous(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	n->dev[2].exclusive = 1;
	struct claim c = tu_whole(2);
	c.placement = PLACE_PREFER_IDS;
	c.prefer_ids[0] = 6;
	c.prefer_ids[1] = 2;       /* busy: skipped */
	c.prefer_ids[2] = 4;
	c.nprefer = 3;
	struct fit f;
	char ids[32];
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	fit_ids(n, &f, ids, sizeof(ids));
	assert_string_equal(ids, "4,6");
	c = tu_whole(3);
	c.placement = PLACE_CONTIGUOUS;
	n->dev[4].exclusive = 1;   /* free: 0 1 3 5 6 7 -> first run of 3 is 5,6,7 */
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	fit_ids(n, &f, ids, sizeof(ids));
	assert_string_equal(ids, "5,6,7");
	n->dev[6].exclusive = 1;   /* no run left: falls back to the lowest ids */
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	fit_ids(n, &f, ids, sizeof(ids));
	assert_string_equal(ids, "0,1,3");
	gpu_node_free(n);
}

static void test_spread_placement_alternates_islands(void **state)
{
	(void)state;
	struct gpu_node *n = two_islands();
	struct claim c = tu_whole(2);
	c.placement = PLACE_SPREAD;
	c.topo = TOPO_IGNORE;
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_not_equal(n->dev[f.dev[0]].island, n->dev[f.dev[1]].island);
	gpu_node_free(n);
}

static void test_shared_binpack_and_spread(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 3, GPU_VENDOR_NVIDIA, "A10", 24576);
	n->dev[1].shared = 1;
	n->dev[1].used_core = 500;
	n->dev[1].used_mib = 8192;
	struct claim c = tu_shared(4096, 300);
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(f.dev[0], 1);       /* the partly used GPU */
	assert_true(fit_node(n, &c, PACK_SPREAD, &f));
	assert_int_not_equal(f.dev[0], 1);
	gpu_node_free(n);
}

static void test_shared_never_exceeds_capacity(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 1, GPU_VENDOR_NVIDIA, "A10", 24576);
	struct claim c = tu_shared(10000, 400);
	struct fit f;
	for (int i = 0; i < 2; i++) {
		assert_true(fit_node(n, &c, PACK_BINPACK, &f));
		fit_apply(n, &c, &f);
	}
	/* 20000 MiB and 800 milli used: neither a third 10000 MiB nor 400 milli fits. */
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_false(f.unresolvable);
	assert_non_null(strstr(f.reason, "roomiest: gpu 0, 4576 MiB, 20%"));
	struct claim small = tu_shared(4000, 200);
	assert_true(fit_node(n, &small, PACK_BINPACK, &f));
	struct claim core_only = tu_shared(0, 300);
	assert_false(fit_node(n, &core_only, PACK_BINPACK, &f));
	/* A shared GPU is not free for an exclusive claim, and vice versa. */
	struct claim whole = tu_whole(1);
	assert_false(fit_node(n, &whole, PACK_BINPACK, &f));
	gpu_node_free(n);
}

static void test_shared_too_big_for_any_gpu(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 2, GPU_VENDOR_NVIDIA, "T4", 15360);
	struct claim c = tu_shared(20000, 100);
	struct fit f;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	assert_string_equal(f.reason, "GPUs have 15360 MiB, claim shares 20000 MiB of each");
	gpu_node_free(n);
}

/* The node's device plugin has share slots per GPU: a full GPU takes no more shares. */
static void test_share_slots(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 2, GPU_VENDOR_NVIDIA, "H100", 81920);
	n->share_slots = 2;
	struct claim c = tu_shared(1000, 0);
	struct fit f;
	gpu_hold(&n->dev[0], true, 1000, 0);
	gpu_hold(&n->dev[0], true, 1000, 0);
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(f.dev[0], 1);              /* gpu 0 has memory left but no slot */
	gpu_hold(&n->dev[1], true, 1000, 0);
	gpu_hold(&n->dev[1], true, 1000, 0);
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_non_null(strstr(f.reason, "share slots"));
	n->share_slots = 0;                          /* no plugin: memory and compute alone decide */
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	gpu_node_free(n);
}

static void test_exclusive_blocks_shared(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 1, GPU_VENDOR_NVIDIA, "T4", 15360);
	n->dev[0].exclusive = 1;
	struct claim c = tu_shared(1000, 100);
	struct fit f;
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_non_null(strstr(f.reason, "all in exclusive use"));
	gpu_node_free(n);
}

static void test_mig_instances(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 3, GPU_VENDOR_NVIDIA, "NVIDIA A100-SXM4-40GB", 40960);
	n->info[1].mig_profile = "3g.20gb";
	n->info[2].mig_profile = "1g.5gb";
	n->dev[1].mig = n->dev[2].mig = true;
	struct claim c = tu_whole(1);
	c.mode = CLAIM_MIG;
	strcpy(c.models, "1g.5gb");
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	assert_int_equal(f.dev[0], 2);
	/* Whole-GPU claims never take a MIG instance. */
	struct claim whole = tu_whole(2);
	assert_false(fit_node(n, &whole, PACK_BINPACK, &f));
	assert_true(f.unresolvable);
	gpu_node_free(n);
}

static void test_host_resources(void **state)
{
	(void)state;
	struct gpu_node *n = tu_node("n", 1, GPU_VENDOR_NVIDIA, "T4", 15360);
	n->cpu_cap = 4000;
	n->mem_cap = 8192;
	struct claim c;
	claim_init(&c);
	c.cpu_milli = 3000;
	struct fit f;
	assert_true(fit_node(n, &c, PACK_BINPACK, &f));
	fit_apply(n, &c, &f);
	assert_false(fit_possible(n, &c));
	assert_false(fit_node(n, &c, PACK_BINPACK, &f));
	assert_false(f.unresolvable);
	fit_unapply(n, &c, &f);
	assert_true(fit_possible(n, &c));
	gpu_node_free(n);
}

static void test_fit_possible_agrees_with_fit_node(void **state)
{
	(void)state;
	struct gpu_node *n = two_islands();
	unsigned seed = 7;
	for (int round = 0; round < 500; round++) {
		for (int i = 0; i < n->ndev; i++) {
			n->dev[i].exclusive = (uint16_t)(rand_r(&seed) % 3 == 0);
			n->dev[i].health = rand_r(&seed) % 10 ? GPU_HEALTHY : GPU_UNHEALTHY;
		}
		struct claim c = tu_whole(1 + rand_r(&seed) % 6);
		c.topo = (enum topo_mode)(rand_r(&seed) % 3);
		struct fit f;
		assert_int_equal(fit_possible(n, &c), fit_node(n, &c, PACK_BINPACK, &f));
		if (f.ok) {
			assert_int_equal(f.ndev, c.count);
			for (int k = 0; k < f.ndev; k++)
				assert_true(gpu_usable(&n->dev[f.dev[k]]) && !n->dev[f.dev[k]].exclusive);
		}
	}
	gpu_node_free(n);
}

/*
 * The common share claim (memory and compute, perhaps a vendor or a least
 * memory) takes a one-pass path; with a string every device matches (the
 * architecture) the same claim takes the general one. Both must choose
 * alike: the same device, ties to the lower index, the same failures.
 */
static void test_plain_share_chooses_as_the_general_path(void **state)
{
	(void)state;
	static const uint32_t sizes[] = { 16384, 24576, 81920 };
	unsigned seed = 11;
	int placed = 0, refused = 0, mig = 0, amd = 0, small = 0;
	for (int round = 0; round < 3000; round++) {
		struct gpu_node *n = tu_node("n", 1 + rand_r(&seed) % 8, GPU_VENDOR_NVIDIA, "H100", 81920);
		n->share_slots = rand_r(&seed) % 4;
		for (int i = 0; i < n->ndev; i++) {
			struct gpu_device *d = &n->dev[i];
			d->memory_mib = sizes[rand_r(&seed) % 3];
			if (rand_r(&seed) % 4 == 0) {
				d->vendor = GPU_VENDOR_AMD;
				n->info[i].arch = "hopper";   /* the string every device matches */
			}
			switch (rand_r(&seed) % 8) {
			case 0:
				d->exclusive = 1;
				break;
			case 1:
				d->health = GPU_UNHEALTHY;
				break;
			case 2:
				d->external = true;
				break;
			case 3:
				d->mig = true;
				break;
			default:   /* coarse steps, so that devices tie */
				for (int k = rand_r(&seed) % 4; k > 0; k--)
					gpu_hold(d, true, 4096u * (rand_r(&seed) % 3), 250u * (rand_r(&seed) % 3));
			}
		}
		struct claim quick = tu_shared(4096u * (rand_r(&seed) % 5), 250u * (rand_r(&seed) % 4));
		if (rand_r(&seed) % 3 == 0)
			quick.vendor = rand_r(&seed) % 2 ? GPU_VENDOR_NVIDIA : GPU_VENDOR_AMD;
		if (rand_r(&seed) % 3 == 0)
			quick.min_mem_mib = sizes[rand_r(&seed) % 3];
		struct claim general = quick;
		strcpy(general.arch, "hopper");
		for (int pack = PACK_BINPACK; pack <= PACK_SPREAD; pack++) {
			struct fit a, b;
			bool ok = fit_node(n, &quick, (enum gpu_pack)pack, &a);
			assert_int_equal(ok, fit_node(n, &general, (enum gpu_pack)pack, &b));
			assert_int_equal(ok, fit_possible(n, &quick));
			if (!ok) {
				assert_string_equal(a.reason, b.reason);
				refused++;
				continue;
			}
			assert_int_equal(a.ndev, 1);
			assert_int_equal(a.dev[0], b.dev[0]);
			const struct gpu_device *d = &n->dev[a.dev[0]];
			mig += d->mig;
			assert_true(!quick.vendor || d->vendor == quick.vendor);
			assert_true(d->memory_mib >= quick.min_mem_mib);
			amd += quick.vendor == GPU_VENDOR_AMD;
			small += quick.min_mem_mib && d->memory_mib < 81920;
			placed++;
		}
		gpu_node_free(n);
	}
	assert_int_equal(mig, 0);
	assert_true(placed > 1000 && refused > 1000 && amd > 50 && small > 50);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_gpu_claim_fits_everywhere),
		cmocka_unit_test(test_node_without_gpus),
		cmocka_unit_test(test_exclusive_takes_lowest_free),
		cmocka_unit_test(test_busy_reason_is_resolvable),
		cmocka_unit_test(test_unhealthy_devices_are_skipped),
		cmocka_unit_test(test_external_use_is_respected),
		cmocka_unit_test(test_vendor_mismatch_unresolvable),
		cmocka_unit_test(test_mixed_vendors_pick_the_asked_one),
		cmocka_unit_test(test_model_and_memory_selectors),
		cmocka_unit_test(test_label_selector),
		cmocka_unit_test(test_topology_required_reason),
		cmocka_unit_test(test_topology_required_bandwidth),
		cmocka_unit_test(test_whole_claims_keep_big_islands_whole),
		cmocka_unit_test(test_prefer_ids_and_contiguous),
		cmocka_unit_test(test_spread_placement_alternates_islands),
		cmocka_unit_test(test_shared_binpack_and_spread),
		cmocka_unit_test(test_shared_never_exceeds_capacity),
		cmocka_unit_test(test_shared_too_big_for_any_gpu),
		cmocka_unit_test(test_exclusive_blocks_shared),
		cmocka_unit_test(test_share_slots),
		cmocka_unit_test(test_mig_instances),
		cmocka_unit_test(test_host_resources),
		cmocka_unit_test(test_fit_possible_agrees_with_fit_node),
		cmocka_unit_test(test_plain_share_chooses_as_the_general_path),
	};
	return cmocka_run_group_tests_name("fit", tests, NULL, NULL);
}
