/*
 * ratings: what a filter's policy made of the nodes it passed, kept for
 * the prioritize of the same pod that kube-scheduler sends next. A filter
 * rates each node it passes while the node's devices are in the caches;
 * the prioritize takes the rating of each node whose view is the one the
 * filter rated (views are immutable: a node that changed since has a new
 * one, with an id never used before) under the same policy and learned
 * workload, and rates only the others. Ids, not the views: a slot keeps
 * no snapshot alive. A few slots, the oldest replaced; thread-safe.
 */
#ifndef GPU_RATINGS_H
#define GPU_RATINGS_H

#include "cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define RATINGS_SLOTS 4

/* Whose ratings, and under what they were made. */
struct ratings_key {
	const char *uid;       /* the pod's */
	int policy;
	uint32_t workload;     /* the learned workload's version */
};

struct ratings {
	pthread_mutex_t lock;
	unsigned next;         /* the slot the next put replaces */
	struct ratings_slot {
		char uid[64];
		int policy;
		uint32_t workload;
		int n;
		uint32_t *view;   /* the ids of the views rated (cache_node.id); 0: none */
		double *raw;      /* the policy's rating of each */
		bool *ok;         /* false: the policy could not place the claim there */
	} slot[RATINGS_SLOTS];
};

void ratings_init(struct ratings *r);
void ratings_release(struct ratings *r);
/*
 * Keeps the ratings of n nodes, by their views' ids (0: none), replacing
 * the pod's earlier ones. Takes the three arrays (malloc'd), whatever it
 * keeps.
 */
void ratings_put(struct ratings *r, const struct ratings_key *k, uint32_t *view, double *raw, bool *ok, int n);
/*
 * For n nodes as a later snapshot has them (view[i], NULL when unknown):
 * where kept ratings under k hold node i in that very view, fills raw[i]
 * and ok[i] and sets known[i]. Returns how many it filled.
 */
int ratings_get(struct ratings *r, const struct ratings_key *k, const struct cache_node *const *view, int n,
		double *raw, bool *ok, bool *known);

#endif
