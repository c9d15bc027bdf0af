/* Internal to src/reserve: what reserve_gang.c offers the bind (reserve.c) and the reaper. */
#ifndef GPU_RESERVE_GANG_H
#define GPU_RESERVE_GANG_H

#include "reserve_impl.h"

struct gang_plan;

/* Deletes the lock Leases of gangs whose time is up, and takes back unfinished plans (a reaper pass). */
void reserve_gang_reap(struct reserve *r, time_t now);
/*
 * The gang's phase (Waiting, Reserved, Bound, TimedOut) where kubectl shows
 * it: the GpuClaim's status.gang, or the PodGroup's status (claim ""), when
 * it changed. size 0: not known here (left as it was); plan: the spread
 * (nodes, topology domains) of the places just reserved, or NULL.
 */
void reserve_gang_status(struct reserve *r, const char *ns, const char *gang, const char *claim, const char *phase,
			 int size, const struct gang_plan *plan, const char *message);
/* GangTimedOut on the gang's members the pod watch knows and on its PodGroup (the reaper, after releasing its places). */
void reserve_gang_timed_out(struct reserve *r, const char *ns, const char *gang, const char *claim);
/* Whether the gang holds places no member took yet (its members may then take nothing else). */
bool reserve_gang_has_places(struct reserve *r, const char *ns, const char *gang);
/*
 * Whether the pod's gang still lacks members (fewer bound than its size, as
 * the ledgers show it) and the pod holds nothing yet: then it may be bound
 * only into a place, never beside the gang (the filter plans places for it).
 * True when the size cannot be read.
 */
bool reserve_gang_incomplete(struct reserve *r, const struct api_pod_ref *pod, const struct claim *c);
/*
 * Whether a member asking c (of namespace ns) may take ledger entry e over:
 * a free place of its gang, of a plan seen Written, whose devices hold c's
 * whole claim (devices: the node's, unused).
 */
/* A place's gang timeout: its own (the gang's gangTimeoutSeconds), else the extender's. */
int reserve_place_timeout(const struct reserve *r, int own_s);
bool reserve_gang_can_take(struct reserve *r, const struct gpu_node *devices, const struct ledger_entry *e,
			   const char *ns, const struct claim *c);
/* A member's bind took a place of its gang over: Bound once none is left. */
void reserve_gang_place_taken(struct reserve *r, const char *ns, const struct claim *c);
/* Frees what reserve_gang.c keeps in r (reserve_free). */
void reserve_gang_free(struct reserve *r);

#endif
