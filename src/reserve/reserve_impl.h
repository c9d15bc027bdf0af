/*
 * Internal to src/reserve: the state its files share (struct reserve and
 * what it keeps). Functions live in a private header per file (store.h,
 * watch.h, podread.h, status.h, update.h, binding.h, reserve_gang.h,
 * reserve_edit.h); docs/architecture.md draws which file calls which.
 */
#ifndef GPU_RESERVE_IMPL_H
#define GPU_RESERVE_IMPL_H

#include "keyset.h"
#include "ledger.h"
#include "reflector.h"
#include "reserve.h"
#include "store.h"
#include "strmap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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
static inline bool resv_id_eq(struct resv_id x, struct resv_id y)
{
	return x.since == y.since && x.token == y.token;
}
/*
 * What the pod watch tells about one pod that holds (or asks for) GPUs: only
 * what the reaper and the gang planner read. One allocation a pod, its
 * strings after it, and its uid the key r->pods finds it by: the largest
 * clusters hold 520,000 of these, and offsets instead of six pointers and
 * no second copy of the uid save some 40 bytes each. The allocation
 * annotation ("<node>:<ids>") is kept without its node when that is the
 * pod's spec.nodeName, as it is once bound: a second copy of the node's
 * name a pod. With the uid's offset (always 0) left out and a 32-bit
 * generation, a record of the bench's pods fits a 112-byte heap block
 * instead of 128 (8 MiB at 520,000).
 */
enum pod_string {
	POD_UID,         /* first: at offset 0 */
	POD_NS,
	POD_NAME,
	POD_NODE,        /* spec.nodeName, "" while unbound */
	POD_ALLOCATED,   /* its gpu.scheduling/allocated annotation (read with pod_alloc_ids, pod_allocated) */
	POD_GANG,        /* its claim's gang, or "" */
	POD_GPUCLAIM,    /* its claim's GpuClaim, or "" */
	POD_STRINGS
};
struct pod_state {
	uint32_t gen;               /* the relist it was last seen in: pods_gen's low 32 bits */
	uint32_t mem_mib, core;
	uint32_t held_in_pass;      /* the last reaper pass that found it in a ledger */
	uint16_t at[POD_STRINGS - 1];   /* where each string after the uid starts in strings[] */
	uint8_t mode;               /* enum claim_mode, its claim's: for putting back a lost reservation */
	bool finished;              /* Succeeded or Failed */
	bool wants_gpu;
	bool ids_only;              /* POD_ALLOCATED holds what follows "<POD_NODE>:" in the annotation */
	char strings[];
};

static inline const char *pod_str(const struct pod_state *p, enum pod_string s)
{
	return p->strings + (s == POD_UID ? 0 : p->at[s - 1]);
}

/* The ids of an allocation annotation when it is "<node>:<ids>", else NULL. */
static inline const char *alloc_ids_on(const char *annotation, const char *node)
{
	size_t nl = strlen(node);
	return nl && !strncmp(annotation, node, nl) && annotation[nl] == ':' ? annotation + nl + 1 : NULL;
}

/* The ids of the pod's allocation annotation when it is "<node>:<ids>", else NULL. */
static inline const char *pod_alloc_ids(const struct pod_state *p, const char *node)
{
	const char *a = pod_str(p, POD_ALLOCATED);
	if (p->ids_only)
		return strcmp(pod_str(p, POD_NODE), node) ? NULL : a;
	return alloc_ids_on(a, node);
}

/* The pod's allocation annotation whole, as the pod has it ("" when none), into out. */
static inline void pod_allocated(const struct pod_state *p, char *out, size_t size)
{
	if (p->ids_only)
		snprintf(out, size, "%s:%s", pod_str(p, POD_NODE), pod_str(p, POD_ALLOCATED));
	else
		snprintf(out, size, "%s", pod_str(p, POD_ALLOCATED));
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
	struct store store;             /* where the ledgers, reservation Leases and gang locks are kept */
	struct ledger_turns turns[LEDGER_TURNS];
	char ns[64], identity[128], selector[256];
	pthread_mutex_t gang_lock;      /* one gang reservation at a time in this replica (reserve_gang.c) */
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
	struct strmap gang_status;      /* "ns/gang" -> char *: the status last written (reserve_gang.c) */
	struct strmap gang_written;     /* "<gang id>-p<plan>" -> (void *)1: plans seen Written (reserve_gang.c) */
	struct strmap gang_writing;     /* lock name -> struct lock_seen *: Writing plans' locks (reserve_gang.c) */
	char podgroup_version[16];      /* scheduling.k8s.io's version for PodGroups, or "" (reserve_gang.c) */
	bool podgroup_discovered;       /* podgroup_version is discovery's answer, at podgroup_checked_ms */
	int64_t podgroup_checked_ms;
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

/* Wakes the reaper for a pass now; the caller holds r->lock. */
static inline void reaper_kick(struct reserve *r)
{
	r->kicked = true;
	pthread_cond_signal(&r->wake);
}

#endif
