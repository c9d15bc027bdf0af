/*
 * ledger: the reservation records as they are stored in the API server.
 *
 * Every node has one ledger Lease in the extender's namespace,
 * gpu-ledger.<node>, whose annotation gpu.scheduling/reservations holds all
 * reservations on that node as a JSON list. It is the single source of
 * truth: every change is a resourceVersion-checked write of the whole list,
 * so two extender replicas (or two schedulers) can never both take the last
 * GPU, shared or not. Each reservation also has a Lease in its pod's
 * namespace, gpu-reservation.<pod uid>.<node hash>, owned by the pod
 * (ownerReference), which the garbage collector deletes with the pod. It is
 * named after the node too, so that two binds of one pod racing on two nodes
 * never touch each other's.
 */
#ifndef GPU_LEDGER_H
#define GPU_LEDGER_H

#include "buf.h"
#include "cache.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>

#define LEDGER_LABEL "gpu.scheduling/ledger"
#define LEDGER_ANN_NODE "gpu.scheduling/node"
#define LEDGER_ANN_RESERVATIONS "gpu.scheduling/reservations"
#define RESERVATION_LABEL "gpu.scheduling/reservation"
/*
 * The format version of a ledger, reservation or gang lock Lease, as an
 * annotation the writer sets. None means 1, the format of 0.2.0 (which
 * wrote none and ignores it). A reader refuses a Lease of a newer version:
 * it neither reads it nor writes over it (docs/architecture.md, "Stored
 * formats"). The version goes up only for a change an older reader would
 * misread; a key it can ignore (as "try") keeps it.
 */
#define LEDGER_ANN_VERSION "gpu.scheduling/ledger-version"
#define LEDGER_VERSION 1
#define LEDGER_NAME_MAX 254

/*
 * One reservation in a ledger: the allocation, the pod's namespace and name
 * whole, and the GpuClaim to keep current. A gang's place (reserved for a
 * member not bound yet) is an entry of its own: a.uid "gang-<hash>-<n>",
 * name the gang; a member bound into it keeps the gang's name. Places
 * unused gang_timeout_s after a.since go.
 */
struct ledger_entry {
	struct alloc a;
	char ns[64];
	char name[LEDGER_NAME_MAX];
	char claim[254];          /* GpuClaim name in ns, or "" */
	char gang[128];           /* gang name in ns, or "" */
	int gang_timeout_s;       /* places: how long they are kept */
};

/* Sets e's namespace and pod (or gang) name, and its allocation's display name. */
void ledger_entry_set_pod(struct ledger_entry *e, const char *ns, const char *name);

#define LEDGER_PLACE_PREFIX "gang-"
/* Whether an entry of that uid is a gang's place rather than a pod's reservation. */
static inline bool ledger_uid_is_place(const char *uid)
{
	return !strncmp(uid, LEDGER_PLACE_PREFIX, sizeof(LEDGER_PLACE_PREFIX) - 1);
}
static inline bool ledger_entry_is_place(const struct ledger_entry *e)
{
	return ledger_uid_is_place(e->a.uid);
}

struct ledger {
	char node[254];
	char rv[64];              /* resourceVersion of the Lease; "" when it does not exist */
	int n, cap;
	struct ledger_entry *e;
};

void ledger_init(struct ledger *l, const char *node);
void ledger_release(struct ledger *l);
int ledger_add(struct ledger *l, const struct ledger_entry *e);
/* Index of the pod's entry, or -1. */
int ledger_find(const struct ledger *l, const char *uid);
void ledger_remove_at(struct ledger *l, int i);

/*
 * A ledger's entries packed for keeping: the reservation module holds the
 * ledger of every node as last watched, and a struct ledger_entry takes
 * 992 bytes (fixed-size names and ids) for a one-GPU pod's 100 or so. They
 * are packed as the cache's records of the node (struct alloc_rec, which
 * hold the claim, gang and gang timeout too), in one block the cache then
 * shares (cache_share_allocs): one copy of every reservation, not two.
 */
struct ledger_packed {
	struct alloc_block *block;   /* NULL when there are none */
	int n;
};

/* l's entries packed; 0, or -1 when out of memory (out is then empty). */
int ledger_pack(const struct ledger *l, struct ledger_packed *out);
void ledger_packed_release(struct ledger_packed *p);
/* The entry at *pos into *e, *pos moved past it; false at the end. Start with *pos = 0. */
bool ledger_packed_next(const struct ledger_packed *p, size_t *pos, struct ledger_entry *e);
/* The strings of a packed entry where they lie (no copy). */
struct ledger_packed_strs {
	const char *uid, *ns, *name, *claim, *gang;
};
/* The strings of the entry at *pos, *pos moved past it; false at the end. Start with *pos = 0. */
bool ledger_packed_next_strs(const struct ledger_packed *p, size_t *pos, struct ledger_packed_strs *out);
/* The first entry as the cache's record (alloc_rec_next() to the next, n of them), or NULL when none. */
static inline const struct alloc_rec *ledger_packed_first(const struct ledger_packed *p)
{
	return p->block ? alloc_block_recs(p->block) : NULL;
}
/* Whether an entry of the pod is there. */
bool ledger_packed_holds(const struct ledger_packed *p, const char *uid);
/* The ledger of node at rv with p's entries; 0, or -1 when out of memory. */
int ledger_unpack(const struct ledger_packed *p, const char *node, const char *rv, struct ledger *out);

/*
 * A gang's plan: one reservation of its places. The gang's lock Lease
 * records it (annotation gpu.scheduling/gang-plan) before any place is
 * written, Writing; Written once every place is; RolledBack when a replica
 * takes an unfinished one back (docs/gang.md). Its places' uids name it:
 * gang-<gang id>-p<plan>-<slot>. A member takes a place only of a plan
 * seen Written.
 */
#define GANG_PLAN_ANN "gpu.scheduling/gang-plan"
enum gang_plan_state { PLAN_WRITING = 0, PLAN_WRITTEN, PLAN_ROLLED_BACK };
struct gang_intent {
	char plan[9];              /* 8 hex digits */
	int total;                 /* places of the plan, slots 0..total-1 */
	enum gang_plan_state state;
	int nnodes;
	char (*nodes)[254];        /* the nodes its places go to; ledger_intent_release frees them */
};
/* The annotation's value (a JSON text) into out. */
int ledger_intent_encode(const struct gang_intent *in, struct buf *out);
/* The annotation's value -> out; 0, or -1 with err (out is then empty). */
int ledger_intent_decode(const char *text, struct gang_intent *out, char *err, size_t errlen);
void ledger_intent_release(struct gang_intent *in);
/* A plan's place uid: gang-<id>-p<plan>-<slot>. */
void ledger_place_uid(const char *id, const char *plan, int slot, char *out, size_t size);
/* The plan a place's uid names, into plan; false for places from before plans (gang-<id>-<n>, -r<uid>). */
bool ledger_place_plan(const char *uid, char plan[9]);

/* A gang's id: a hash of "<namespace>/<name>", in its places' uids and its lock Lease's name. */
void ledger_gang_id(const char *ns, const char *gang, char out[17]);
/* Lease names: gpu-ledger.<node> (hashed when too long), gpu-reservation.<uid>.<node hash>. */
void ledger_lease_name(const char *node, char *out, size_t size);
void ledger_reservation_name(const char *uid, const char *node, char *out, size_t size);

/* A ledger Lease object -> l (node from its annotation). 0, or -1 with err (a newer format included). */
int ledger_decode(const cJSON *lease, struct ledger *l, char *err, size_t errlen);
/* The Lease object for l (with metadata.resourceVersion when l->rv is set). */
int ledger_encode(const struct ledger *l, const char *ns, const char *holder, struct buf *out);
/* The pod's reservation Lease (owned by the pod). */
int ledger_encode_reservation(const struct ledger_entry *e, const char *node, struct buf *out);
/* Whether a Lease's format (LEDGER_ANN_VERSION) is one this program reads; else false with err. */
bool ledger_version_known(const cJSON *lease, char *err, size_t errlen);

/* MicroTime as the API server wants it: 2006-01-02T15:04:05.000000Z. */
void ledger_microtime(char *out, size_t size);

#endif
