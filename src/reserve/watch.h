/*
 * Internal to src/reserve: what the watches keep (the ledgers as last
 * watched or written, the GPU pods, the reservation Leases) and the marks
 * on pods the reaper looks at.
 */
#ifndef GPU_RESERVE_WATCH_H
#define GPU_RESERVE_WATCH_H

#include "reserve_impl.h"

/* Points the store's watch events (r->store) at the functions that keep what they bring; once, at reserve_new. */
void reserve_watch_events(struct reserve *r);
/*
 * The node's ledger as last watched or written (a copy): an empty one with
 * no resourceVersion when the watch listed the ledgers and the node has
 * none; false while that is not known. And a ledger just written, kept as
 * if the watch had brought it (takes l).
 */
bool reserve_known_ledger(struct reserve *r, const char *node, struct ledger *out);
void reserve_ledger_written(struct reserve *r, const char *node, struct ledger *l);
/* A copy of the node's devices as used by the entries of l (a deleted pod's entry uses nothing). */
struct gpu_node *reserve_node_in_ledger(struct reserve *r, const struct gpu_node *devices, const struct ledger *l);
/* The pod is gone (a fresh read said so): its GPUs are free in the cache at once; the reaper releases
 * them in the ledger. Under r->lock. */
void reserve_mark_gone(struct reserve *r, const char *uid);
/*
 * A pod the watch lost sight of (its GPUs freed in the cache on that hint)
 * that a fresh read found alive, or could not tell: the cache shows the
 * node's kept ledger again, so the pod holds its GPUs there too. Takes r->lock.
 */
void reserve_cache_hold_again(struct reserve *r, const char *node, const char *uid);
/* The pod's claim (*c, the caller releases it) and whether it asks for GPUs; takes the claims' lock. */
bool reserve_pod_wants(struct reserve *r, const cJSON *pod, struct claim *c);

#endif
