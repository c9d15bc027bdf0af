/*
 * policy: node scoring. Each policy chooses the devices a claim would take
 * on a node and rates that placement; the extender maps the ratings onto
 * kube-scheduler's 0..10 range, the simulator takes the best directly.
 * Pure functions over const inputs; the only state is the caller's ctx.
 */
#ifndef GPU_POLICY_H
#define GPU_POLICY_H

#include "claim.h"
#include "fit.h"
#include "gpu.h"

#include <stdint.h>

enum policy_id {
	POLICY_BINPACK = 0,  /* fuller nodes and GPUs first */
	POLICY_SPREAD,       /* emptier nodes and GPUs first */
	POLICY_TOPOLOGY,     /* best interconnect fit, then binpack */
	POLICY_COUNT
};

#define POLICY_SCORE_MAX 10   /* kube-scheduler's MaxExtenderPriority */

struct workload;              /* workload.h: the task mix seen so far */

struct policy_ctx {
	enum policy_id id;
	const struct workload *wl;  /* may be NULL: policies fall back to a prior */
	uint64_t seed;              /* varies per decision, for random choices */
};

const char *policy_name(enum policy_id id);
bool policy_parse(const char *name, enum policy_id *out);

/*
 * Chooses devices for c on n and rates the placement (higher is better;
 * only the order between nodes of one decision matters). Returns false, with
 * out->reason set, when c does not fit n.
 */
bool policy_place(const struct policy_ctx *ctx, const struct gpu_node *n,
		  const struct claim *c, struct fit *out, double *score);

/*
 * Maps the ratings of n nodes onto 0..POLICY_SCORE_MAX: the best node gets
 * the maximum, the worst 0, linear between; nodes with ok[i] false get 0.
 * When all ratings are equal every fitting node gets the maximum.
 */
void policy_scale(const double *raw, const bool *ok, size_t n, int64_t *out);

#endif
