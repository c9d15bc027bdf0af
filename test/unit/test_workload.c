/* The online task-mix histogram: prior, popularity cut, snapshots, decay. */
#include "testutil.h"

#include "workload.h"

#include <math.h>
#include <stdlib.h>

static double psum(const struct wl_pop *pop, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += pop[i].p;
	return s;
}

static void test_prior_is_a_usable_mix(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(true);
	int n;
	const struct wl_pop *pop = workload_snapshot(wl, &n);
	assert_true(n > 3);
	assert_true(fabs(psum(pop, n) - 1) < 1e-9);
	assert_true(wl->p_cpu_only > 0 && wl->p_cpu_only < 0.5);
	assert_true(wl->cpu_per_gpu > 0 && wl->mem_per_gpu > 0);
	/* NULL means the prior, everywhere. */
	const struct wl_pop *p0 = workload_snapshot(NULL, &n);
	assert_true(fabs(psum(p0, n) - 1) < 1e-9);
	double cpu, mem;
	workload_host_per_gpu(NULL, &cpu, &mem);
	/* The initial snapshot is the prior cut at 95 %: close to the whole prior. */
	assert_true(cpu > 0 && fabs(cpu - wl->cpu_per_gpu) < 0.3 * cpu);
	assert_true(mem > 0 && fabs(mem - wl->mem_per_gpu) < 0.3 * mem);
	free(wl);
}

/* The benchmark's cut: most popular shapes until they cover 95 %, renormalised. */
static void test_popularity_cut(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	wl->rebuild_frac = 1e9;
	struct claim a = tu_task(4000, 1024, 1, 500, ""), b = tu_task(8000, 1024, 1, 1000, "");
	struct claim cpu = tu_task(2000, 512, 0, 0, ""), rare = tu_task(64000, 1024, 8, 1000, "");
	for (int i = 0; i < 60; i++)
		workload_observe(wl, &a);
	for (int i = 0; i < 30; i++)
		workload_observe(wl, &b);
	for (int i = 0; i < 6; i++)
		workload_observe(wl, &cpu);
	for (int i = 0; i < 4; i++)
		workload_observe(wl, &rare);
	workload_rebuild(wl);
	/* 60 + 30 = 90 < 95, + 6 = 96 >= 95: three shapes, the 8-GPU one cut. */
	assert_int_equal(wl->npop, 3);
	assert_true(fabs(wl->pop[0].p - 60.0 / 96) < 1e-9);
	assert_int_equal(wl->pop[0].s.gpu_milli, 500);
	assert_true(fabs(wl->p_cpu_only - 6.0 / 96) < 1e-9);
	/* The scan layout: GPU shapes only, by ascending milli. */
	assert_int_equal(wl->nfast, 2);
	assert_int_equal(wl->fast[0].milli, 500);
	assert_int_equal(wl->fast[1].milli, 1000);
	/* Per GPU of demand: (60*4 + 30*8 + 6*2) vCPU over (60*0.5 + 30) GPUs. */
	assert_true(fabs(wl->cpu_per_gpu - (60 * 4000.0 + 30 * 8000 + 6 * 2000) / 60) < 1e-6);
	free(wl);
}

static void test_memory_is_a_mean_not_a_key(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	struct claim a = tu_task(4000, 1000, 1, 1000, ""), b = tu_task(4000, 3000, 1, 1000, "");
	workload_observe(wl, &a);
	workload_observe(wl, &b);
	assert_int_equal(wl->nshapes, 1);
	assert_int_equal(wl->shapes[0].mem_mib, 2000);
	free(wl);
}

static void test_specs_are_interned(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	struct claim t4 = tu_task(4000, 0, 1, 1000, "T4"), v = tu_task(4000, 0, 1, 1000, "V100M16|V100M32");
	workload_observe(wl, &t4);
	workload_observe(wl, &v);
	workload_observe(wl, &t4);
	assert_int_equal(wl->nspecs, 2);
	assert_int_equal(wl->nshapes, 2);
	assert_string_equal(workload_spec(wl, 0), "T4");
	assert_string_equal(workload_spec(wl, -1), "");
	struct wl_shape s;
	workload_shape_of(wl, &v, &s);
	assert_int_equal(s.spec, 1);
	struct claim other = tu_task(4000, 0, 1, 1000, "A100");
	workload_shape_of(wl, &other, &s);
	assert_int_equal(s.spec, -2);
	free(wl);
}

/* Snapshots follow the mix: often at first, then as it grows by a fraction. */
static void test_rebuilds_are_geometric(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(true);
	uint32_t v0 = wl->version;
	struct claim a = tu_task(4000, 1024, 1, 470, "");
	for (int i = 0; i < 10000; i++)
		workload_observe(wl, &a);
	uint32_t versions = wl->version - v0;
	assert_true(versions > 10 && versions < 60);
	/* The prior has faded: the observed shape dominates. */
	assert_int_equal(wl->pop[0].s.gpu_milli, 470);
	assert_true(wl->pop[0].p > 0.99);
	free(wl);
}

static void test_decay_keeps_weights_bounded(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	struct claim a = tu_task(4000, 1024, 1, 500, ""), b = tu_task(8000, 1024, 1, 1000, "");
	for (int i = 0; i < 70000; i++)
		workload_observe(wl, &a);
	assert_true(wl->total <= WL_DECAY_AT);
	/* A change of mix shows up within a window, not after the whole history. */
	for (int i = 0; i < 70000; i++)
		workload_observe(wl, &b);
	workload_rebuild(wl);
	assert_int_equal(wl->pop[0].s.gpu_milli, 1000);
	free(wl);
}

static void test_eviction_when_full(void **state)
{
	(void)state;
	struct workload *wl = tu_workload(false);
	struct claim heavy = tu_task(1000, 0, 1, 1000, "");
	for (int i = 0; i < 5; i++)
		workload_observe(wl, &heavy);
	for (int i = 0; i < WL_MAX_SHAPES + 50; i++) {
		struct claim c = tu_task(2000 + i, 0, 1, 300, "");
		workload_observe(wl, &c);
	}
	assert_int_equal(wl->nshapes, WL_MAX_SHAPES);
	/* The heaviest shape survived; the total is still the sum. */
	double sum = 0;
	bool found = false;
	for (int i = 0; i < wl->nshapes; i++) {
		sum += wl->shapes[i].weight;
		found |= wl->shapes[i].cpu_milli == 1000;
	}
	assert_true(found);
	assert_true(fabs(sum - wl->total) < 1e-6);
	free(wl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prior_is_a_usable_mix),
		cmocka_unit_test(test_popularity_cut),
		cmocka_unit_test(test_memory_is_a_mean_not_a_key),
		cmocka_unit_test(test_specs_are_interned),
		cmocka_unit_test(test_rebuilds_are_geometric),
		cmocka_unit_test(test_decay_keeps_weights_bounded),
		cmocka_unit_test(test_eviction_when_full),
	};
	return cmocka_run_group_tests_name("workload", tests, NULL, NULL);
}
