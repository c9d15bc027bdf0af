/* Internal to src/reserve: a bind's edit of the node's ledger (reserve.c), exposed for tests. */
#ifndef GPU_RESERVE_EDIT_H
#define GPU_RESERVE_EDIT_H

#include "reserve_impl.h"

struct bind_ctx {
	struct reserve *r;
	const struct bind_request *req;
	struct ledger_entry entry;    /* what was (or already is) reserved */
	struct gpu_node *node;        /* devices of the node, for the annotations */
	bool existed;                 /* the ledger version decided on held the pod's entry already */
	bool took_place;              /* a gang member took over its gang's place */
	bool need_place;              /* its gang has places: it may take nothing else */
	uint32_t token;               /* this try's */
};
/*
 * Keeps the pod's entry when the ledger holds one already (a retried bind),
 * else takes a free place of its gang, else reserves what the policy
 * chooses on this ledger version. LEDGER_WRITE, or -BIND_* with err.
 */
int reserve_edit_reserve(void *ctx, struct ledger *l, char *err, size_t errlen);

#endif
