/* Shared helpers for the cmocka unit tests: small node, claim and workload builders. */
#ifndef GPU_TESTUTIL_H
#define GPU_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "claim.h"
#include "gpu.h"
#include "intern.h"
#include "workload.h"

/* A node with ndev identical devices, ids 0..ndev-1, no islands. */
static inline struct gpu_node *tu_node(const char *name, int ndev, enum gpu_vendor v,
				       const char *model, uint32_t mib)
{
	struct gpu_node *n = gpu_node_new(name);
	assert_non_null(n);
	for (int i = 0; i < ndev; i++) {
		struct gpu_device d;
		struct gpu_device_info in;
		memset(&d, 0, sizeof(d));
		memset(&in, 0, sizeof(in));
		d.id = i;
		d.island = -1;
		d.vendor = v;
		d.memory_mib = mib;
		in.model = intern(model);
		in.arch = v == GPU_VENDOR_AMD ? "gfx942" : "hopper";
		assert_int_equal(gpu_node_add_device(n, &d, &in), 0);
	}
	return n;
}

/* Puts devices [from, to] of n on island name. */
static inline void tu_island(struct gpu_node *n, const char *name, double bw, int from, int to)
{
	int is = gpu_node_island(n, name, bw);
	assert_true(is >= 0);
	for (int i = from; i <= to; i++)
		n->dev[gpu_node_find_device(n, i)].island = is;
}

static inline struct claim tu_whole(int count)
{
	struct claim c;
	claim_init(&c);
	c.mode = CLAIM_EXCLUSIVE;
	c.count = count;
	return c;
}

static inline struct claim tu_shared(uint32_t mib, uint32_t core)
{
	struct claim c;
	claim_init(&c);
	c.mode = CLAIM_SHARED;
	c.count = 1;
	c.mem_mib = mib;
	c.core = core;
	return c;
}

/*
 * An openb task, by the simulator's own rule (claim_from_task): host CPU
 * (milli) and memory (MiB), count GPUs of milli each (below 1000: a share
 * of one GPU), on one of models ("": any).
 */
static inline struct claim tu_task(int64_t cpu, int64_t mem, int count, uint32_t milli,
				   const char *models)
{
	struct claim c;
	claim_from_task(&c, cpu, mem, count, milli, models);
	return c;
}

/* A workload on the heap (it is large), with or without the prior; free() it. */
static inline struct workload *tu_workload(bool prior)
{
	struct workload *wl = malloc(sizeof(*wl));
	assert_non_null(wl);
	workload_init(wl, prior);
	return wl;
}

#endif
