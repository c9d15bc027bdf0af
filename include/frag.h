/*
 * frag: GPU fragmentation of a node with respect to a workload (the FGD
 * paper's measure, fgd-benchmark.md section 4), in milli-GPU.
 *
 * For one task shape m, the fragment F_n(m) is the idle GPU of node n that m
 * could not use: all of it when m is CPU-only, may not run on n's model, or
 * does not fit n at all (CPU, or not enough devices with room); otherwise
 * the idle GPU on the devices too full for m (and on devices of a model m
 * may not use). The node's fragmentation is F_n(M) = sum_m p_m F_n(m) over
 * the workload's snapshot. Only usable whole devices count (not MIG
 * instances, not unhealthy or externally held ones); exclusive devices have
 * nothing idle.
 *
 * Pure: a struct frag_node is a small copy of what the measure reads, so
 * callers can try a placement on it ("what if") without touching the node.
 */
#ifndef GPU_FRAG_H
#define GPU_FRAG_H

#include "claim.h"
#include "fit.h"
#include "gpu.h"
#include "workload.h"

#include <stdbool.h>
#include <stdint.h>

/* Flags for frag_shape() / frag_amount(). */
#define FRAG_HOST_MEM 1u   /* a shape also needs its host memory to fit (the paper ignores it) */

struct frag_node {
	int ngpu;                         /* usable whole devices */
	int16_t free[GPU_MAX_DEVICES];    /* their idle milli-GPU, descending */
	uint8_t idx[GPU_MAX_DEVICES];     /* the device each entry is, in gpu_node.dev */
	uint32_t specs[GPU_MAX_DEVICES];  /* bit s: the device matches workload spec s */
	uint32_t specs_all;               /* bits every device matches */
	bool mixed;                       /* devices differ in the specs they match */
	int64_t free_sum;                 /* sum of free[] */
	int64_t cpu_free, mem_free;       /* host; INT64_MAX when not tracked */
};

/* Captures n's state. The spec bits are those of wl's spec table (wl may be NULL). */
void frag_node_init(struct frag_node *fn, const struct gpu_node *n, const struct workload *wl);

/*
 * What-if: takes milli from entry k of fn (keeping free[] sorted) and the
 * host resources of a task. k < 0 takes nothing from the GPUs.
 */
void frag_node_take(struct frag_node *fn, int k, int milli, int64_t cpu, int64_t mem);

/* Entry of fn for device index dev of the node, or -1. */
int frag_node_find(const struct frag_node *fn, int dev);

/* F_n(m) in milli-GPU. */
double frag_shape(const struct frag_node *fn, const struct wl_shape *m, unsigned flags);

/* F_n(M) = sum over wl's snapshot of p_m F_n(m); wl may be NULL (a default prior). */
double frag_amount(const struct frag_node *fn, const struct workload *wl, unsigned flags);

/*
 * GPUs of the node that the host cannot feed: idle GPUs beyond what its free
 * CPU and memory would carry if tasks came with the workload's average CPU
 * and memory per GPU (CPU-only tasks' share included). A node whose CPU or
 * memory runs out before its GPUs strands them; this counts how many, 0 when
 * the host has enough. In GPUs (not milli).
 */
double frag_stranded(const struct frag_node *fn, const struct workload *wl);

/* A node measure in milli-GPU, lower is better (F_n(M) or a variant). */
typedef double (*frag_measure_fn)(const struct frag_node *fn, const struct workload *wl);
/* How a policy rates the measure going from before to after; higher is better. */
typedef double (*frag_rate_fn)(double before, double after);

/*
 * Rates placing c on n where fit_node() put it (f): rate(measure before,
 * measure after). A single shared claim instead tries each GPU it fits
 * (one per idle amount when the devices are alike), keeps in f the one
 * rated best (the first among equals) and returns its rating.
 */
double frag_rate_placement(const struct gpu_node *n, const struct claim *c, struct fit *f,
			   const struct workload *wl, frag_measure_fn measure, frag_rate_fn rate);

#endif
