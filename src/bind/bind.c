/* bind: the allocation record a bind makes (bind.h). */
#include "bind.h"
#include "clock.h"

#include <stdio.h>
#include <string.h>

int bind_alloc(struct alloc *a, const struct bind_request *req, const struct gpu_node *n, const struct fit *f,
	       char *err, size_t errlen)
{
	const struct claim *c = req->claim;
	memset(a, 0, sizeof(*a));
	snprintf(a->uid, sizeof(a->uid), "%s", req->uid);
	alloc_set_pod(a, req->ns, req->name);
	a->since = clock_wall_s();
	a->mode = c->mode;
	a->mem_mib = c->mode == CLAIM_SHARED ? c->mem_mib : 0;
	a->core = c->mode == CLAIM_SHARED ? c->core : 0;
	for (int k = 0; k < f->ndev; k++) {
		if (alloc_add_id(a, n->dev[f->dev[k]].id)) {
			if (err)
				snprintf(err, errlen, "node %s: the devices' ids lie more than %d apart", req->node, ALLOC_ID_SPAN);
			return -1;
		}
	}
	return 0;
}
