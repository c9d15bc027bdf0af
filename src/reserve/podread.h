/*
 * Internal to src/reserve: fresh reads of pods (a GET without
 * resourceVersion is a quorum read), the proof a release rests on where
 * the pod watch gives only a hint. Pods are the API server's whatever
 * storage keeps the reservations, so their reads are not the store's.
 */
#ifndef GPU_RESERVE_PODREAD_H
#define GPU_RESERVE_PODREAD_H

#include "reserve_impl.h"

/*
 * The pod named ns/name with uid, as a fresh read has it: 1 alive (*out its
 * object, the caller deletes it), 0 gone (404, or another pod of that name
 * now), -1 cannot tell. *out is NULL unless alive.
 */
int reserve_read_pod(struct reserve *r, const char *ns, const char *name, const char *uid, cJSON **out);
/*
 * Fences the pod ns/name with uid, read unbound at resourceVersion version,
 * before its reservation on node goes as not bound in time: a write that
 * holds only while the pod is still that version (ANN_NUDGED, so that
 * kube-scheduler tries it again). A binding carries the version its pod
 * had before its reservation was written; once the pod is fenced, the API
 * server refuses every such binding, however late it comes, so the
 * devices can go to another pod. 0 fenced; -1 not (the pod changed since:
 * it may be bound now; or the write failed, logged): keep the reservation.
 */
int reserve_fence_pod(struct reserve *r, const char *ns, const char *name, const char *uid, const char *version,
		      const char *node);
/*
 * Reads now the pods the pod watch lost sight of that hold entries in the
 * node's kept ledger (a few): one found gone is marked gone (its entries
 * then count for nothing in decisions on that ledger), without waiting for
 * the reaper. For a caller about to decide on the ledger that would
 * otherwise find GPUs held by pods deleted a moment ago and give up (a
 * gang's reservation, which kube-scheduler retries only on a later event).
 * Takes r->lock.
 */
void reserve_confirm_hints(struct reserve *r, const char *node);

#endif
