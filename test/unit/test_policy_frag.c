/*
 * The fragmentation measure and the fragmentation-aware policies: the
 * benchmark's baselines, FGD and fgd-balanced.
 */
#include "testutil.h"

#include "frag.h"
#include "policy.h"
#include "workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* An openb-style node: ngpu GPUs of model, host CPU and memory. */
static struct gpu_node *node(const char *name, int ngpu, const char *model, int64_t cpu, int64_t mem)
{
	struct gpu_node *n = tu_node(name, ngpu, GPU_VENDOR_NVIDIA, model, 0);
	n->cpu_cap = cpu;
	n->mem_cap = mem;
	return n;
}

static void take(struct gpu_node *n, int dev, uint32_t milli)
{
	if (milli >= GPU_CORE_FULL) {
		n->dev[dev].exclusive++;
	} else {
		n->dev[dev].shared++;
		n->dev[dev].used_core += milli;
	}
}

static struct wl_shape shape(int64_t cpu, int count, uint32_t milli, int spec)
{
	struct wl_shape s;
	memset(&s, 0, sizeof(s));
	s.cpu_milli = cpu;
	s.count = count;
	s.gpu_milli = milli;
	s.spec = spec;
	return s;
}

/* fgd-benchmark.md section 4, case by case. */
static void test_frag_of_one_shape(void **state)
{
	(void)state;
	struct gpu_node *n = node("n", 4, "T4", 16000, 65536);
	take(n, 0, 1000);          /* free: 0, 1000, 1000, 1000 */
	take(n, 1, 700);           /* free: 0, 300, 1000, 1000 */
	take(n, 2, 500);           /* free: 0, 300, 500, 1000 */
	struct frag_node fn;
	frag_node_init(&fn, n, NULL);
	assert_int_equal(fn.free_sum, 1800);
	assert_int_equal(fn.free[0], 1000);
	/* CPU-only: every idle GPU is fragment. */
	struct wl_shape s = shape(1000, 0, 0, -1);
	assert_true(frag_shape(&fn, &s, 0) == 1800);
	/* Fits: only the devices too small count. */
	s = shape(1000, 1, 400, -1);
	assert_true(frag_shape(&fn, &s, 0) == 300);
	s = shape(1000, 1, 1000, -1);
	assert_true(frag_shape(&fn, &s, 0) == 800);
	/* Not enough devices with room, or not enough CPU: all of it. */
	s = shape(1000, 2, 1000, -1);
	assert_true(frag_shape(&fn, &s, 0) == 1800);
	s = shape(20000, 1, 100, -1);
	assert_true(frag_shape(&fn, &s, 0) == 1800);
	/* Host memory only when asked. */
	s = shape(1000, 1, 400, -1);
	s.mem_mib = 100000;
	assert_true(frag_shape(&fn, &s, 0) == 300);
	assert_true(frag_shape(&fn, &s, FRAG_HOST_MEM) == 1800);
	gpu_node_free(n);
}

static void test_frag_respects_model_specs(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	struct claim v = tu_task(1000, 0, 1, 1000, "V100M16|V100M32");
	struct claim t4 = tu_task(1000, 0, 1, 1000, "T4");
	workload_observe(wl, &v);
	workload_observe(wl, &t4);
	workload_rebuild(wl);
	struct gpu_node *n = node("n", 2, "T4", 16000, 65536);
	struct frag_node fn;
	frag_node_init(&fn, n, wl);
	struct wl_shape sv = shape(1000, 1, 1000, 0), st = shape(1000, 1, 1000, 1);
	assert_true(frag_shape(&fn, &sv, 0) == 2000);   /* no access */
	assert_true(frag_shape(&fn, &st, 0) == 0);
	/* F_n(M): half the mix cannot use this node at all. */
	assert_true(fabs(frag_amount(&fn, wl, 0) - 1000) < 1e-9);
	gpu_node_free(n);
	free(wl);
}

/* The one-pass scan gives the same sum as shape by shape. */
static void test_frag_amount_fast_path_agrees(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(true);
	unsigned seed = 11;
	static const uint32_t sizes[] = { 100, 250, 470, 500, 810, 1000, 1000, 1000 };
	for (int i = 0; i < 400; i++) {
		int k = rand_r(&seed) % 10;
		struct claim c = k < 8 ? tu_task(1000 + rand_r(&seed) % 20 * 1000, rand_r(&seed) % 64 * 1024,
						 1, sizes[k], "")
				       : tu_task(4000, 4096, k == 8 ? 2 : 0, 1000, "");
		if (k < 3 && rand_r(&seed) % 2)
			snprintf(c.models, sizeof(c.models), "%s", rand_r(&seed) % 2 ? "T4" : "G2|G3");
		workload_observe(wl, &c);
	}
	workload_rebuild(wl);
	for (int round = 0; round < 300; round++) {
		struct gpu_node *n = node("n", 1 + rand_r(&seed) % 8, round % 3 ? "T4" : "G2",
					  rand_r(&seed) % 64000, rand_r(&seed) % 262144);
		if (round % 7 == 0)
			n->info[0].model = "G3";   /* a mixed node */
		for (int d = 0; d < n->ndev; d++) {
			int r = rand_r(&seed) % 4;
			if (r == 1)
				take(n, d, 1000);
			else if (r == 2)
				take(n, d, 1 + rand_r(&seed) % 999);
		}
		n->cpu_used = rand_r(&seed) % (n->cpu_cap + 1);
		n->mem_used = rand_r(&seed) % (n->mem_cap + 1);
		struct frag_node fn;
		frag_node_init(&fn, n, wl);
		for (unsigned flags = 0; flags < 2; flags++) {
			double slow = 0;
			for (int i = 0; i < wl->npop; i++)
				slow += wl->pop[i].p * frag_shape(&fn, &wl->pop[i].s, flags);
			assert_true(fabs(slow - frag_amount(&fn, wl, flags)) < 1e-6);
		}
		gpu_node_free(n);
	}
	free(wl);
}

static void test_frag_node_take_keeps_order(void **state)
{
	(void)state;
	struct gpu_node *n = node("n", 4, "G2", 96000, 393216);
	take(n, 1, 300);
	struct frag_node fn;
	frag_node_init(&fn, n, NULL);
	int e = frag_node_find(&fn, 0);
	assert_true(e >= 0);
	frag_node_take(&fn, e, 800, 1000, 100);
	for (int k = 1; k < fn.ngpu; k++)
		assert_true(fn.free[k - 1] >= fn.free[k]);
	assert_int_equal(fn.free_sum, 4000 - 300 - 800);
	assert_int_equal(fn.free[fn.ngpu - 1], 200);
	assert_int_equal(fn.idx[fn.ngpu - 1], 0);
	assert_int_equal(fn.cpu_free, 95000);
	gpu_node_free(n);
}

static void test_stranded_gpus(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	struct claim c = tu_task(10000, 40960, 1, 1000, "");    /* 10 vCPU, 40 GiB per GPU */
	workload_observe(wl, &c);
	workload_rebuild(wl);
	struct gpu_node *n = node("n", 8, "G2", 96000, 393216);
	struct frag_node fn;
	frag_node_init(&fn, n, wl);
	assert_true(frag_stranded(&fn, wl) == 0);      /* 96 vCPU feed 8 GPUs */
	n->cpu_used = 76000;                             /* 20 vCPU left: 2 GPUs fed */
	frag_node_init(&fn, n, wl);
	assert_true(fabs(frag_stranded(&fn, wl) - 6) < 1e-9);
	n->cpu_used = 0;
	n->mem_used = 393216 - 81920;                    /* 80 GiB left: 2 GPUs fed */
	frag_node_init(&fn, n, wl);
	assert_true(fabs(frag_stranded(&fn, wl) - 6) < 1e-9);
	gpu_node_free(n);
	free(wl);
}

static double rate(enum policy_id id, const struct workload *wl, const struct gpu_node *n,
		   const struct claim *c, struct fit *f)
{
	struct policy_ctx ctx = { .id = id, .wl = wl, .seed = 7 };
	double s = NAN;
	assert_true(policy_place(&ctx, n, c, f, &s));
	return s;
}

static void test_names_and_ids(void **state)
{
	(void)state;
	assert_int_equal(POLICY_BINPACK, 0);
	assert_int_equal(POLICY_SPREAD, 1);
	assert_int_equal(POLICY_TOPOLOGY, 2);
	static const char *const names[] = { "random", "dotprod", "clustering", "packing",
					     "bestfit", "fgd", "fgd-balanced" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		enum policy_id id;
		assert_true(policy_parse(names[i], &id));
		assert_string_equal(policy_name(id), names[i]);
	}
	assert_true(policy_flags(POLICY_RANDOM) & POLICY_USES_SEED);
	assert_true(policy_flags(POLICY_FGD) & POLICY_USES_WORKLOAD);
	assert_true(policy_flags(POLICY_FGD_BALANCED) & POLICY_USES_WORKLOAD);
	assert_int_equal(policy_flags(POLICY_BESTFIT), 0);
}

/* Random: the decision's seed picks the node and the GPU, reproducibly. */
static void test_random_uses_the_seed(void **state)
{
	(void)state;
	struct gpu_node *n = node("n", 8, "G2", 96000, 393216);
	struct claim c = tu_task(1000, 0, 1, 300, "");
	struct policy_ctx ctx = { .id = POLICY_RANDOM, .seed = 1 };
	struct fit f;
	double a, b, seen[8] = { 0 };
	assert_true(policy_place(&ctx, n, &c, &f, &a));
	assert_true(policy_place(&ctx, n, &c, &f, &b));
	assert_true(a == b);
	for (uint64_t s = 0; s < 200; s++) {
		ctx.seed = s;
		assert_true(policy_place(&ctx, n, &c, &f, &a));
		assert_true(a >= 0 && a < 1);
		seen[f.dev[0]] = 1;
	}
	double spread = 0;
	for (int i = 0; i < 8; i++)
		spread += seen[i];
	assert_true(spread >= 6);   /* random GPUs, not always the first */
	/* Rating only (the caller checked the fit): the same rating. */
	ctx.seed = 5;
	assert_true(policy_place(&ctx, n, &c, &f, &a));
	ctx.rate_only = true;
	assert_true(policy_place(&ctx, n, &c, &f, &b));
	assert_true(a == b);
	gpu_node_free(n);
}

static void test_clustering_tiers(void **state)
{
	(void)state;
	struct gpu_node *same = node("same", 8, "G2", 96000, 393216);
	struct gpu_node *mixed = node("mixed", 8, "G2", 96000, 393216);
	struct gpu_node *idle = node("idle", 8, "G2", 96000, 393216);
	struct gpu_node *other = node("other", 8, "G2", 96000, 393216);
	struct claim share = tu_task(1000, 0, 1, 500, "");
	same->task_kinds = TASK_KIND_SHARED | TASK_KIND_CPU_ONLY;   /* CPU-only does not count */
	mixed->task_kinds = TASK_KIND_SHARED | TASK_KIND_WHOLE(1);
	other->task_kinds = TASK_KIND_WHOLE(2);
	struct fit f;
	double s1 = rate(POLICY_CLUSTERING, NULL, same, &share, &f);
	double s2 = rate(POLICY_CLUSTERING, NULL, mixed, &share, &f);
	double s3 = rate(POLICY_CLUSTERING, NULL, idle, &share, &f);
	double s4 = rate(POLICY_CLUSTERING, NULL, other, &share, &f);
	assert_true(s1 >= 75 && s2 >= 50 && s2 < 75 && s3 >= 25 && s3 < 50 && s4 < 25);
	struct claim cpu = tu_task(1000, 0, 0, 0, "");
	assert_true(rate(POLICY_CLUSTERING, NULL, same, &cpu, &f) == 0);
	gpu_node_free(same);
	gpu_node_free(mixed);
	gpu_node_free(idle);
	gpu_node_free(other);
}

static void test_packing_tiers(void **state)
{
	(void)state;
	struct gpu_node *partial = node("p", 4, "T4", 96000, 393216);
	struct gpu_node *used = node("u", 4, "T4", 96000, 393216);
	struct gpu_node *idle = node("i", 4, "T4", 96000, 393216);
	take(partial, 0, 500);
	take(used, 0, 1000);
	struct claim share = tu_task(1000, 0, 1, 400, "");
	struct fit f;
	double a = rate(POLICY_PACKING, NULL, partial, &share, &f);
	assert_int_equal(f.dev[0], 0);   /* best fit: the partly used GPU */
	double b = rate(POLICY_PACKING, NULL, used, &share, &f);
	double c = rate(POLICY_PACKING, NULL, idle, &share, &f);
	assert_true(a >= 50 && b >= 33 && b < 50 && c <= 33);
	gpu_node_free(partial);
	gpu_node_free(used);
	gpu_node_free(idle);
}

static void test_bestfit_and_dotprod_prefer_tight_nodes(void **state)
{
	(void)state;
	struct gpu_node *tight = node("t", 2, "T4", 16000, 65536);
	struct gpu_node *roomy = node("r", 8, "G2", 96000, 393216);
	struct claim c = tu_task(8000, 1024, 1, 1000, "");
	struct fit f;
	assert_true(rate(POLICY_BESTFIT, NULL, tight, &c, &f) > rate(POLICY_BESTFIT, NULL, roomy, &c, &f));
	assert_true(rate(POLICY_DOTPROD, NULL, tight, &c, &f) > rate(POLICY_DOTPROD, NULL, roomy, &c, &f));
	gpu_node_free(tight);
	gpu_node_free(roomy);
}

/* FGD: a share goes where it leaves the smallest useless sliver. */
static void test_fgd_prefers_less_fragmentation(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	struct claim whole = tu_task(4000, 0, 1, 1000, ""), half = tu_task(2000, 0, 1, 500, "");
	for (int i = 0; i < 10; i++)
		workload_observe(wl, &whole);
	for (int i = 0; i < 10; i++)
		workload_observe(wl, &half);
	workload_rebuild(wl);
	/* One GPU half used: the next half fills it, the fresh GPU stays whole. */
	struct gpu_node *n = node("n", 2, "T4", 64000, 262144);
	take(n, 1, 500);
	struct fit f;
	rate(POLICY_FGD, wl, n, &half, &f);
	assert_int_equal(f.dev[0], 1);
	rate(POLICY_FGD_BALANCED, wl, n, &half, &f);
	assert_int_equal(f.dev[0], 1);
	/* Across nodes: filling the half-used node beats breaking a fresh one. */
	struct gpu_node *fresh = node("fresh", 2, "T4", 64000, 262144);
	assert_true(rate(POLICY_FGD, wl, n, &half, &f) > rate(POLICY_FGD, wl, fresh, &half, &f));
	assert_true(rate(POLICY_FGD_BALANCED, wl, n, &half, &f) >
		    rate(POLICY_FGD_BALANCED, wl, fresh, &half, &f));
	gpu_node_free(n);
	gpu_node_free(fresh);
	free(wl);
}

/* fgd-balanced: a CPU-hungry GPU task goes to the host with CPU to spare. */
static void test_balanced_feeds_gpus(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	struct claim lean = tu_task(4000, 16384, 1, 1000, ""), hungry = tu_task(24000, 65536, 1, 1000, "");
	for (int i = 0; i < 20; i++)
		workload_observe(wl, &lean);
	for (int i = 0; i < 5; i++)
		workload_observe(wl, &hungry);
	workload_rebuild(wl);
	/* Same GPUs; one host has 12 vCPU per GPU, the other 52. */
	struct gpu_node *poor = node("poor", 8, "G2", 96000, 393216);
	struct gpu_node *rich = node("rich", 8, "G2", 416000, 786432);
	for (int d = 0; d < 4; d++) {
		take(poor, d, 1000);
		take(rich, d, 1000);
	}
	poor->cpu_used = rich->cpu_used = 60000;
	struct fit f;
	assert_true(rate(POLICY_FGD_BALANCED, wl, rich, &hungry, &f) >
		    rate(POLICY_FGD_BALANCED, wl, poor, &hungry, &f));
	/* Without a workload the prior stands in. */
	assert_true(rate(POLICY_FGD_BALANCED, NULL, rich, &hungry, &f) >
		    rate(POLICY_FGD_BALANCED, NULL, poor, &hungry, &f));
	gpu_node_free(poor);
	gpu_node_free(rich);
	free(wl);
}

static void test_policies_refuse_what_does_not_fit(void **state)
{
	(void)state;
	struct gpu_node *n = node("n", 2, "T4", 8000, 65536);
	struct claim big = tu_task(16000, 0, 1, 1000, "");
	for (int id = 0; id < POLICY_COUNT; id++) {
		struct policy_ctx ctx = { .id = (enum policy_id)id, .seed = 3 };
		struct fit f;
		double s;
		assert_false(policy_place(&ctx, n, &big, &f, &s));
	}
	gpu_node_free(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frag_of_one_shape),
		cmocka_unit_test(test_frag_respects_model_specs),
		cmocka_unit_test(test_frag_amount_fast_path_agrees),
		cmocka_unit_test(test_frag_node_take_keeps_order),
		cmocka_unit_test(test_stranded_gpus),
		cmocka_unit_test(test_names_and_ids),
		cmocka_unit_test(test_random_uses_the_seed),
		cmocka_unit_test(test_clustering_tiers),
		cmocka_unit_test(test_packing_tiers),
		cmocka_unit_test(test_bestfit_and_dotprod_prefer_tight_nodes),
		cmocka_unit_test(test_fgd_prefers_less_fragmentation),
		cmocka_unit_test(test_balanced_feeds_gpus),
		cmocka_unit_test(test_policies_refuse_what_does_not_fit),
	};
	return cmocka_run_group_tests_name("policy_frag", tests, NULL, NULL);
}
