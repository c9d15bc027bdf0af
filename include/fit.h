/*
 * fit: can a claim run on a node right now, and on which devices.
 * Pure: reads the node and the claim, writes only *out.
 */
#ifndef GPU_FIT_H
#define GPU_FIT_H

#include "claim.h"
#include "gpu.h"

/* How to pick among devices that all fit: fullest first or emptiest first. */
enum gpu_pack { PACK_BINPACK = 0, PACK_SPREAD };

struct fit {
	bool ok;
	/* When !ok: true if no amount of preemption could make it fit. */
	bool unresolvable;
	int ndev;
	int dev[GPU_MAX_DEVICES];   /* indices into node->dev, ascending */
	char reason[224];           /* one line for a person, when !ok */
};

/*
 * Decides feasibility and chooses devices. On failure, out->reason says why
 * in one line, e.g. "5 free GPUs but no island has 4 (nvlink-0: 2, nvlink-1: 3)".
 * Returns out->ok.
 */
bool fit_node(const struct gpu_node *n, const struct claim *c, enum gpu_pack pack,
	      struct fit *out);

/*
 * Only the feasibility question, for callers that try many placements (the
 * simulator, lookahead policies): no device choice, no reason text.
 */
bool fit_possible(const struct gpu_node *n, const struct claim *c);

/*
 * The devices of n that could take one device's worth of c right now
 * (selectors and room checked, host resources and labels not), as indices
 * into n->dev, ascending, into idx[GPU_MAX_DEVICES]. Returns how many. For
 * policies that choose the device themselves.
 */
int fit_candidates(const struct gpu_node *n, const struct claim *c, int *idx);

/*
 * A node counted for the commonest claim: whole GPUs, nothing selected
 * (fit_whole_applies). Such a claim fits exactly when `free` >= its count,
 * and when `exact`, binpack and spread rate it from these counts alone
 * (policy_rate_whole). A node's state gives the same counts every time:
 * the cache keeps them in each view, so a request reads a few bytes of a
 * node instead of its devices.
 */
struct fit_whole {
	uint8_t free;      /* whole GPUs (not MIG) usable and held by nobody */
	uint8_t usable;    /* usable devices (healthy, not held outside) */
	uint8_t held;      /* usable devices held whole */
	bool exact;        /* every other usable device is idle: their use adds 0 */
};

void fit_whole_count(const struct gpu_node *n, struct fit_whole *out);
/* Whole GPUs with no selectors, labels, host resources or island required. */
bool fit_whole_applies(const struct claim *c);

/* Records / removes the claim's usage on n (the devices in f). */
void fit_apply(struct gpu_node *n, const struct claim *c, const struct fit *f);
void fit_unapply(struct gpu_node *n, const struct claim *c, const struct fit *f);

/* Device ids of f as "2,3" into out. */
void fit_ids(const struct gpu_node *n, const struct fit *f, char *out, size_t size);

#endif
