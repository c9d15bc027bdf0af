/*
 * workload: the task mix seen so far, learned online, for the
 * fragmentation-aware policies (FGD's "target workload" M).
 *
 * A histogram of task shapes (host CPU, milli-GPU per device, device count,
 * GPU model constraint) plus a small prior, so that a fresh scheduler has a
 * sensible M before it has seen a pod. workload_observe() adds one task;
 * every so often (when the observed weight has grown by a fraction since the
 * last time) it rebuilds the snapshot policies read: the most popular shapes
 * that cover WL_POPULARITY percent of the weight, renormalised to sum to 1
 * (the benchmark's podPopularityThreshold = 95), and bumps version.
 *
 * Pure data: no I/O, no globals, no locks. The owner serialises
 * workload_observe() against readers (the server keeps one per process and
 * hands policies a const pointer under its own lock, or a copy).
 * The struct is self-contained (no pointers), so a copy is a memcpy.
 */
#ifndef GPU_WORKLOAD_H
#define GPU_WORKLOAD_H

#include "claim.h"

#include <stdbool.h>
#include <stdint.h>

#define WL_MAX_SHAPES 512      /* distinct shapes kept; the lightest is evicted */
#define WL_MAX_SPECS 32        /* distinct GPU model constraints ("V100M16|V100M32") */
#define WL_SPEC_LEN 160        /* as claim.models */
#define WL_POPULARITY 95       /* percent of the weight the snapshot covers */
#define WL_PRIOR_WEIGHT 12.0   /* the prior counts as this many tasks */
#define WL_DECAY_AT 65536.0    /* halve all weights when they sum past this */

/* One task shape. */
struct wl_shape {
	int64_t cpu_milli;     /* host CPU request */
	int64_t mem_mib;       /* host memory: mean over the tasks of this shape */
	uint32_t gpu_milli;    /* per device, 1..1000; 0 for a CPU-only task */
	int count;             /* devices; 0 for a CPU-only task */
	int spec;              /* index into workload.specs, or -1: any model */
	double weight;         /* (decayed) number of tasks, prior included */
	double mem_weighted;   /* sum of mem_mib * weight, for the mean */
};

/* The snapshot's entry: a popular shape and its probability. */
struct wl_pop {
	struct wl_shape s;
	double p;              /* popularity, sum over the snapshot is 1 */
};

/* The snapshot's GPU shapes as frag.c scans them (ascending gpu_milli). */
struct wl_fast {
	int32_t milli;
	int16_t count;
	int16_t spec;
	int64_t cpu, mem;
	double p;
};

struct workload {
	/* The histogram. */
	int nshapes;
	struct wl_shape shapes[WL_MAX_SHAPES];
	int nspecs;
	char specs[WL_MAX_SPECS][WL_SPEC_LEN];
	double total;          /* sum of the weights */
	double since_rebuild;  /* weight observed since the last snapshot */
	/* The snapshot the policies read; most popular first. */
	int npop;
	struct wl_pop pop[WL_MAX_SHAPES];
	double p_cpu_only;     /* sum of p over the CPU-only entries of pop */
	/* Host resources the mix brings per whole GPU of demand (CPU-only tasks included). */
	double cpu_per_gpu;    /* millicores */
	double mem_per_gpu;    /* MiB */
	int nfast;
	struct wl_fast fast[WL_MAX_SHAPES];
	uint32_t version;      /* bumped at every rebuild */
	double rebuild_frac;   /* rebuild when since_rebuild >= total * this */
};

/*
 * Starts a workload. With prior, it holds a generic mix (whole GPUs, 1/4 to
 * 3/4 shares, multi-GPU tasks, CPU-only tasks) worth WL_PRIOR_WEIGHT tasks,
 * and the snapshot is built from it; without, it is empty until observed.
 */
void workload_init(struct workload *wl, bool prior);

/* Adds one task (any claim; only its shape is kept). */
void workload_observe(struct workload *wl, const struct claim *c);

/* Rebuilds the snapshot now (and bumps version). */
void workload_rebuild(struct workload *wl);

/* The shape of a claim: fills s (weight 0); spec is looked up, -2 when the
 * claim's model list is not in the table. */
void workload_shape_of(const struct workload *wl, const struct claim *c, struct wl_shape *s);

/*
 * The snapshot policies read: wl's, or the prior's when wl is NULL (so a
 * caller without a workload still gets a sensible M). Sets *n.
 */
const struct wl_pop *workload_snapshot(const struct workload *wl, int *n);

/*
 * Host CPU (millicores) and memory (MiB) per whole GPU of demand under the
 * snapshot (wl NULL: the prior's); 0 when the mix has no GPU demand.
 */
void workload_host_per_gpu(const struct workload *wl, double *cpu, double *mem);

/* The spec string of a shape ("" for -1). */
const char *workload_spec(const struct workload *wl, int spec);

#endif
