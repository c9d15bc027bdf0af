/*
 * Internal to src/reserve: the pod's binding (the Binding POST with the
 * allocation annotations), and making a reservation hold the devices a
 * bound pod's annotation names (the annotation is the truth once bound).
 */
#ifndef GPU_RESERVE_BINDING_H
#define GPU_RESERVE_BINDING_H

#include "reserve_impl.h"

/* What became of a binding whose POST failed. */
enum { BINDING_REFUSED = -1, BINDING_UNKNOWN = -2 };

/* The longest a binding's POST waits for its answer. */
#define BINDING_TIMEOUT_S 10
/*
 * What a binding's POST leaves of the bind timeout: the API server may
 * still apply a request this long after its client gave up.
 */
#define BINDING_MARGIN_MS 1000

/*
 * POST pods/binding (with e: its allocation annotations, n the node's
 * devices), waiting timeout_s at most for its answer; 0 when the pod is
 * (now, or already) on the node, BINDING_REFUSED when it is not,
 * BINDING_UNKNOWN when nobody can tell: no answer came (a connection reset
 * or a timeout after the request went out) or a 5xx did, and the API
 * server may have bound the pod all the same. Then a read of the pod
 * decides when it can. When the pod was on the node already (an earlier
 * try bound it, or this one's answer was lost), *had is its allocation
 * annotation as a read of it showed ("" when not read): an earlier try may
 * have bound it with other devices than e's.
 */
int binding_post(struct reserve *r, const struct bind_request *req, const struct gpu_node *n,
		 const struct ledger_entry *e, long timeout_s, char *had, size_t hadsize, char *err, size_t errlen);
/*
 * The pod was on the node already, bound by an earlier try with devices had
 * (its annotation), while this try reserved reserved (its entry, version
 * token): one ledger write makes that entry hold had's devices, so that
 * neither set looks free meanwhile; ids ("0,1", reserved's) becomes what
 * the pod holds.
 */
void binding_adopt(struct reserve *r, const struct bind_request *req, const struct alloc *reserved, uint32_t token,
		   const struct gpu_node *devices, const char *had, char *ids, size_t idsize);
/*
 * The ids of an allocation annotation ("node:0,1") of node into a (its
 * ids only; a's other fields stay). -1 when it names another node or is bad.
 */
int reserve_parse_allocated(const char *allocated, const char *node, struct alloc *a);
/*
 * Whether a's devices are free in ledger version l, its entry skip (-1:
 * none) left out: 1, 0 (another entry holds one), -1 out of memory.
 */
int reserve_devices_free(const struct gpu_node *devices, const struct ledger *l, int skip, const struct alloc *a);
/*
 * An edit that makes the pod's entry hold the devices its pod has (the
 * allocation annotation, which the binding wrote with spec.nodeName): its
 * ids replaced in one write, so that neither set looks free meanwhile. With
 * only_id, only while the entry is still that version. Devices another entry
 * holds are never taken: clash is set and nothing changes (both stay held).
 */
struct adopt_ctx {
	struct reserve *r;
	const char *uid;
	const struct resv_id *only_id;  /* NULL: any version */
	uint32_t token;                 /* the rewritten entry's */
	struct alloc want;              /* the ids the pod has */
	const struct gpu_node *devices; /* the node's */
	bool clash;
	struct alloc now;               /* the entry as written */
};
int reserve_edit_adopt(void *ctx, struct ledger *l, char *err, size_t errlen);

#endif
