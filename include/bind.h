/*
 * bind: the contract between the extender's verbs and the module that
 * reserves a pod's GPUs (the cache in standalone mode,
 * extender_bind_local; reserve/ in cluster mode, reserve_bind): what a
 * bind asks, what it answers, and the allocation record it makes. Also
 * where a gang member may go (struct gang_route), which reserve/ decides
 * for the extender's filter. Below both, so that neither includes the
 * other.
 */
#ifndef GPU_BIND_H
#define GPU_BIND_H

#include "cache.h"
#include "claim.h"
#include "fit.h"
#include "gpu.h"
#include "policy.h"

#include <stdbool.h>
#include <stddef.h>

struct bind_request {
	const char *ns, *name, *uid, *node;
	const struct claim *claim;
	struct policy_ctx policy;    /* how to choose the devices on the node */
};

/*
 * What a bind returns (a binder's ledger edits return them negated). The
 * metric gpu_extender_binds_total counts binds by these, in this order.
 */
enum { BIND_OK = 0, BIND_NO_FIT, BIND_CONFLICT, BIND_ERROR };

/*
 * The allocation a bind of req makes with the devices of f on n: reserved
 * now. -1 with err (when not NULL) when their ids lie more than
 * ALLOC_ID_SPAN apart (cache.h).
 */
int bind_alloc(struct alloc *a, const struct bind_request *req, const struct gpu_node *n, const struct fit *f,
	       char *err, size_t errlen);

/*
 * Where a gang member may go (docs/gang.md). Not steered: place it as any
 * pod. Steered and ok: only the nodes that hold a place of its gang (its
 * places are reserved first if the gang has none). Steered and not ok: no
 * node now, and reason says why (the gang does not fit, or waits for its
 * members); retry when another try may place it with nothing else changed
 * (its gang's free places are on nodes the request did not name, or its
 * plan is being written).
 */
struct gang_route {
	bool steered, ok, retry;
	int n;
	char (*nodes)[254];          /* malloc'd by the gang fn; the caller frees it */
	char reason[320];
};

#endif
