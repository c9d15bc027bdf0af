/* Internal to src/reserve: the reservation state and the helpers its files share. */
#ifndef GPU_RESERVE_IMPL_H
#define GPU_RESERVE_IMPL_H

#include "keyset.h"
#include "ledger.h"
#include "reflector.h"
#include "reserve.h"
#include "strmap.h"

#include <pthread.h>
#include <time.h>
#include <stdatomic.h>

/*
 * Which version of a pod's reservation a caller looked at: its since and the
 * token of the bind try that wrote it. since alone has one-second
 * resolution, and two tries of one bind within a second wrote the same one.
 */
struct resv_id {
	int64_t since;
	uint32_t token;
};
static inline struct resv_id resv_id_of(const struct alloc *a)
{
	return (struct resv_id){ a->since, a->token };
}
/*
 * What the pod watch tells about one pod that holds (or asks for) GPUs: only
 * what the reaper and the gang planner read. One allocation a pod, its
 * strings after it, and its uid the key r->pods finds it by: the largest
 * clusters hold 520,000 of these, and offsets instead of six pointers and
 * no second copy of the uid save some 40 bytes each.
 */
enum pod_string {
	POD_UID,
	POD_NS,
	POD_NAME,
	POD_NODE,        /* spec.nodeName, "" while unbound */
	POD_ALLOCATED,   /* its gpu.scheduling/allocated annotation */
	POD_GANG,        /* its claim's gang, or "" */
	POD_GPUCLAIM,    /* its claim's GpuClaim, or "" */
	POD_STRINGS
};
struct pod_state {
	uint64_t gen;
	uint32_t mem_mib, core;
	uint32_t held_in_pass;      /* the last reaper pass that found it in a ledger */
	uint16_t at[POD_STRINGS];   /* where each string starts in strings[] */
	uint8_t mode;               /* enum claim_mode, its claim's: for putting back a lost reservation */
	bool finished;              /* Succeeded or Failed */
	bool wants_gpu;
	char strings[];
};

static inline const char *pod_str(const struct pod_state *p, enum pod_string s)
{
	return p->strings + p->at[s];
}

/*
 * A node's ledger as last watched or written: its entries packed (the
 * block the cache shares), its resourceVersion, and the relist generation
 * it was seen in. One block with its strings, the node's name its key in
 * r->ledgers: 65,000 of them in the largest clusters.
 */
struct ledger_box {
	uint64_t gen;
	struct ledger_packed p;
	const char *rv;                 /* in node[], after the name */
	char node[];
};

/*
 * This replica's ledger writes to one node take turns, and one turn carries
 * every edit that queued for the node meanwhile (binds of a burst share a
 * write). Striped by node name: nodes of one stripe take turns too.
 */
#define LEDGER_TURNS 256
struct ledger_job;
struct ledger_turns {
	pthread_mutex_t lock;
	pthread_cond_t done;
	struct ledger_job *queue;       /* edits waiting, of any node of the stripe */
	bool busy;                      /* a write of the stripe is under way */
};

struct reserve {
	struct reserve_opts o;
	struct ledger_turns turns[LEDGER_TURNS];
	char ns[64], identity[128], selector[256];
	pthread_mutex_t gang_lock;      /* one gang reservation at a time in this replica (gang.c) */
	pthread_mutex_t lock;           /* guards everything below */
	struct keyset ledgers;          /* struct ledger_box *, by node */
	struct keyset pods;             /* struct pod_state *, by uid */
	struct strmap gone;             /* uid -> (void *)time: pod gone, as a fresh read of it said */
	struct strmap check;            /* uid -> (void *)time: the pod watch lost sight of it, or its
					 * reservation Lease went; look the pod up */
	struct strmap unwatched;        /* uid -> struct unwatched_pod *: bound pods the watch lost sight of */
	struct strmap first_seen;       /* "uid@node" -> struct entry_seen *: reservations waiting for a bind */
	struct strmap resv;             /* "ns/name" -> struct resv_lease *: the reservation Leases watched */
	uint64_t resv_gen;
	struct strmap gang_status;      /* "ns/gang" -> char *: the status last written (gang.c) */
	struct strmap gang_written;     /* "<gang id>-p<plan>" -> (void *)1: plans seen Written (gang.c) */
	struct strmap gang_writing;     /* lock name -> struct lock_seen *: Writing plans' locks (gang.c) */
	uint64_t pods_gen, ledger_gen;
	uint32_t reap_passes;           /* reaper passes so far (pod_state.held_in_pass) */
	struct reap_stats last_pass;
	bool ledgers_listed;            /* the ledger watch listed them all once: a node it lacks has none */
	struct reflector *watch[3];
	pthread_t reaper;
	bool reaper_started;
	atomic_bool stop;
	pthread_cond_t wake;
	bool kicked;                    /* a pod went or finished: reap now, not at the interval */
	atomic_bool reconciled;         /* the first reap after the lists ran */
	atomic_uint tokens;             /* bind tries so far (reserve_new_token) */
	uint32_t token_salt;            /* from the identity: tokens differ between replicas */
};

/*
 * A pod asking for GPUs that the pod watch lost sight of (deleted, or its
 * managed label taken off): the reaper reads it, and gives one alive and
 * bound a reservation Lease, the record of it an unwatched pod has.
 */
struct unwatched_pod {
	char ns[64], pod[254];
};

/* A reservation Lease as the reservations watch saw it. */
struct resv_lease {
	char ns[64];
	char uid[64];            /* its pod's */
	char node[254];
	char pod[254];           /* its pod's name */
	time_t seen;             /* when this replica first saw it */
	uint64_t gen;
};

/*
 * When this replica first saw a version of a reservation whose pod is not
 * known bound (this replica's monotonic clock: the entry's since is the
 * binding replica's wall clock), and the reaper pass that last met it.
 */
struct entry_seen {
	struct resv_id id;
	int64_t first_ms;
	uint32_t pass;
};

/* The pod is gone (a fresh read said so): its GPUs are free in the cache at once; the reaper releases
 * them in the ledger. Under r->lock. */
void reserve_mark_gone(struct reserve *r, const char *uid);
/*
 * A pod the watch lost sight of (its GPUs freed in the cache on that hint)
 * that a fresh read found alive, or could not tell: the cache shows the
 * node's kept ledger again, so the pod holds its GPUs there too. Takes r->lock.
 */
void reserve_cache_hold_again(struct reserve *r, const char *node, const char *uid);
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
/* The pod's claim (*c, the caller releases it) and whether it asks for GPUs; takes the claims' lock. */
bool reserve_pod_wants(struct reserve *r, const cJSON *pod, struct claim *c);

/* Wakes the reaper for a pass now; the caller holds r->lock. */
static inline void reaper_kick(struct reserve *r)
{
	r->kicked = true;
	pthread_cond_signal(&r->wake);
}

/* What an edit of a ledger decided. */
enum { LEDGER_WRITE = 0, LEDGER_UNCHANGED = 1 };
typedef int (*ledger_edit_fn)(void *ctx, struct ledger *l, char *err, size_t errlen);

/*
 * Reads the node's ledger, lets edit change it, writes it back with the
 * resourceVersion read; on a conflict does it all again (bounded). Edits
 * of the node queued by other threads meanwhile go into the same write.
 * Returns 0 (written), LEDGER_UNCHANGED, or a negative BIND_* code with err
 * set.
 */
int reserve_ledger_update(struct reserve *r, const char *node, ledger_edit_fn edit, void *ctx,
			  char *err, size_t errlen);
/* A token for one bind try (or repair): never 0, and unique in this replica. */
uint32_t reserve_new_token(struct reserve *r);
/*
 * Removes the pods' reservations on the node (ledger, cache, their Leases).
 * With ids, only entries that are still version ids[k] (since and token): a
 * reservation another try of the bind took over, or made again after the
 * caller looked, stays.
 */
int reserve_release(struct reserve *r, const char *node, const char *const *uids, const struct resv_id *ids, int n,
		    char *err, size_t errlen);

/* A bind's edit of the node's ledger (reserve.c), exposed for tests. */
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
int reserve_edit_reserve(void *ctx, struct ledger *l, char *err, size_t errlen);
/* A release's edit: removes the entries of uids still at version ids[k] (all, ids NULL). */
enum { RESV_REMOVED = 1, RESV_KEPT = 2 };   /* what became of each entry; 0: not there */
struct remove_ctx {
	const char *const *uids;
	const struct resv_id *ids;
	unsigned char *what;
	char (*ns)[64];                      /* the namespace of each removed entry */
	int n;
};
int reserve_edit_remove(void *ctx, struct ledger *l, char *err, size_t errlen);
/* Deletes the pod's reservation Lease of that node. */
void reserve_delete_reservation(struct reserve *r, const char *ns, const char *uid, const char *node);
/* Whether the node's ledger, as the API server has it now, holds an entry of uid: 1, 0, or -1 (cannot tell). */
int reserve_ledger_holds(struct reserve *r, const char *node, const char *uid);
void reserve_claim_status(struct reserve *r, const char *ns, const char *claim, const char *phase,
			  const char *node, const char *ids, const char *pod, const char *message);
/* A merge patch of a status subresource; a refusal is logged (what names the object), not returned. */
void reserve_patch_status(struct reserve *r, const char *path, const char *body, const char *what);
/* Now as a status date-time (whole seconds). */
void reserve_status_time(char *out, size_t size);
/* A copy of the node's devices as used by the entries of l (a deleted pod's entry uses nothing). */
struct gpu_node *reserve_node_in_ledger(struct reserve *r, const struct gpu_node *devices, const struct ledger *l);
/*
 * The node's ledger as last watched or written (a copy): an empty one with
 * no resourceVersion when the watch listed the ledgers and the node has
 * none; false while that is not known. And a ledger just written, kept as
 * if the watch had brought it (takes l).
 */
bool reserve_known_ledger(struct reserve *r, const char *node, struct ledger *out);
void reserve_ledger_written(struct reserve *r, const char *node, struct ledger *l);
/* Deletes the lock Leases of gangs whose time is up (gang.c; a reaper pass). */
void reserve_gang_reap(struct reserve *r, time_t now);
/*
 * The gang's phase (Waiting, Reserved, Bound, TimedOut) where kubectl shows
 * it: the GpuClaim's status.gang, or the PodGroup's status (claim ""), when
 * it changed. size 0: not known here (left as it was); plan: the spread
 * (nodes, topology domains) of the places just reserved, or NULL.
 */
struct gang_plan;
void reserve_gang_status(struct reserve *r, const char *ns, const char *gang, const char *claim, const char *phase,
			 int size, const struct gang_plan *plan, const char *message);
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
struct ledger_entry;
bool reserve_gang_can_take(struct reserve *r, const struct gpu_node *devices, const struct ledger_entry *e,
			   const char *ns, const struct claim *c);
/*
 * The ids of an allocation annotation ("node:0,1") of node into a (its
 * ids only; a's other fields stay). -1 when it names another node or is bad.
 */
int reserve_parse_allocated(const char *allocated, const char *node, struct alloc *a);
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
/* Creates the pod's reservation Lease on the node (ownerReference to the pod), or renews it. */
int reserve_create_reservation(struct reserve *r, const struct ledger_entry *e, const char *node, char *err,
			       size_t errlen);
/* Frees what gang.c keeps in r (reserve_free). */
void reserve_gang_free(struct reserve *r);
/* A member's bind took a place of its gang over: Bound once none is left. */
void reserve_gang_place_taken(struct reserve *r, const char *ns, const struct claim *c);
#endif
