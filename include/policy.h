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
	/* The FGD benchmark's baselines (fgd-benchmark.md section 6). */
	POLICY_RANDOM,       /* a random feasible node and GPU (uses ctx.seed) */
	POLICY_DOTPROD,      /* Tetris dot product of free and demand */
	POLICY_CLUSTERING,   /* nodes already running the same kind of task */
	POLICY_PACKING,      /* partly used GPUs, then used nodes, then idle ones */
	POLICY_BESTFIT,      /* the node with the least CPU+GPU left after */
	POLICY_FGD,          /* fragmentation gradient descent (Weng et al., ATC'23) */
	POLICY_FGD_BALANCED, /* ours: FGD + host balance, learned online (policy_fgd_balanced.c) */
	POLICY_COUNT
};

/* What a policy's rating reads besides the node and the claim. */
#define POLICY_USES_SEED 1u      /* ctx.seed: varies per decision */
#define POLICY_USES_WORKLOAD 2u  /* ctx.wl: changes with wl->version */
#define POLICY_USES_NAME 4u      /* the node's name */

#define POLICY_SCORE_MAX 10   /* kube-scheduler's MaxExtenderPriority */

struct workload;              /* workload.h: the task mix seen so far */

struct policy_ctx {
	enum policy_id id;
	const struct workload *wl;  /* may be NULL: policies fall back to a prior */
	uint64_t seed;              /* varies per decision, for random choices */
	/*
	 * The caller has already found that the claim fits the node
	 * (fit_possible) and wants only the rating; it asks again, without
	 * this, for the node it picks. A policy may then skip the feasibility
	 * test and the device choice (out->dev left incomplete). The rating
	 * stays the same.
	 */
	bool rate_only;
};

const char *policy_name(enum policy_id id);
/* POLICY_USES_* bits of the policy. */
unsigned policy_flags(enum policy_id id);
bool policy_parse(const char *name, enum policy_id *out);
/*
 * FNV-1a of s ("" for NULL): ctx.seed from a pod's UID, and the policies'
 * per-node draws. Fixed, so choices repeat across filter, bind and restarts.
 */
uint64_t policy_hash(const char *s);

/*
 * Chooses devices for c on n and rates the placement (higher is better;
 * only the order between nodes of one decision matters). Returns false, with
 * out->reason set, when c does not fit n.
 */
bool policy_place(const struct policy_ctx *ctx, const struct gpu_node *n,
		  const struct claim *c, struct fit *out, double *score);

/*
 * The rating policy_place() gives a claim that fit_whole_applies() to, from
 * a node's counts alone (fit.h), when w says it fits and is exact and the
 * policy rates by use (binpack, spread): true with *score, equal to
 * policy_place()'s to the bit. False otherwise: then only policy_place() knows.
 */
bool policy_rate_whole(enum policy_id id, const struct fit_whole *w, const struct claim *c, double *score);

/*
 * Maps the ratings of n nodes onto 0..POLICY_SCORE_MAX: the best node (and
 * any exact tie with it) gets the maximum, the others 0..max-1, linear from
 * the worst; nodes with ok[i] false get 0. When all ratings are equal every
 * fitting node gets the maximum.
 */
void policy_scale(const double *raw, const bool *ok, size_t n, int64_t *out);

#endif
