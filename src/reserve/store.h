/*
 * Internal to src/reserve: the reservation storage. The only part of the
 * module that speaks to the API server about ledgers and Leases: the nodes'
 * ledger Leases, the pods' reservation Leases, the gangs' lock Leases, and
 * the watches of the first two. Everything above it (update.c, watch.c,
 * reserve_gang.c, reserve.c, reaper.c) decides; the store only keeps and returns.
 *
 * Another storage implements these functions (and struct store's fields)
 * in a file of its own and takes store.c's place in the Makefile's source
 * list: docs/architecture.md, "A new storage for reservations". Its
 * promises are those written at each function: in particular a ledger
 * write at a version that is no longer the stored one fails with
 * STORE_CONFLICT, and a read returns what every replica will see.
 */
#ifndef GPU_RESERVE_STORE_H
#define GPU_RESERVE_STORE_H

#include "cluster.h"
#include "kube.h"
#include "ledger.h"
#include "reflector.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a write or a read came to. */
enum store_result {
	STORE_ERROR = -1,    /* no answer, or a refusal: err says which */
	STORE_OK = 0,
	STORE_CONFLICT = 1,  /* another version is stored now (or none is, or one came meanwhile) */
	STORE_NONE = 2,      /* nothing stored under that name */
};

/*
 * What the ledger watch brings, in the order it came. lock/unlock bracket
 * each batch (a page of a list, one event); begin and end bracket a whole
 * list (end: what the list did not show is gone).
 */
/* What both watches call around their events: a list's begin and end, the lock held while applying. */
struct store_watch_hooks {
	void *ctx;
	void (*lock)(void *ctx);
	void (*unlock)(void *ctx);
	void (*begin)(void *ctx);
	void (*end)(void *ctx);
};

struct store_ledger_events {
	struct store_watch_hooks hooks;   /* first: the sinks' shared forwarders read it */
	/* The node's ledger as stored now (l->rv its version); the callee takes l. */
	void (*put)(void *ctx, const char *node, struct ledger *l);
	/* The node's ledger changed but cannot be read: keep what was. */
	void (*unreadable)(void *ctx, const char *node, const char *err);
	/* The node's ledger was deleted at version rv (NULL: unknown). */
	void (*deleted)(void *ctx, const char *node, const char *rv);
};

/* What the reservations watch brings: every pod's reservation Lease, of any namespace. */
struct store_resv_events {
	struct store_watch_hooks hooks;   /* first, as above */
	/* The Lease ns/name holds pod (its name and uid) reserved on node. */
	void (*put)(void *ctx, const char *ns, const char *name, const char *uid, const char *pod, const char *node);
	/* The Lease ns/name went (uid: its pod's, NULL when it named none). */
	void (*deleted)(void *ctx, const char *ns, const char *name, const char *uid);
};

struct store {
	struct kube_client *client;
	const char *ns;              /* the ledgers' and gang locks' namespace */
	const char *identity;        /* this replica, as the holder it writes */
	struct store_ledger_events ledger_ev;   /* set by whoever asks for a sink */
	struct store_resv_events resv_ev;
};

/* ---- ledgers: one per node ---- */

/* The node's ledger as stored now (a quorum read); none: an empty one, rv "". STORE_OK or STORE_ERROR. */
int store_ledger_read(struct store *s, const char *node, struct ledger *out, char *err, size_t errlen);
/*
 * Stores l: made anew when l->rv is "", else in place of the version l->rv.
 * STORE_OK with *now the version stored (the caller releases it; rv "" when
 * the answer did not say), STORE_CONFLICT when another version is stored
 * (or none any more, or one was made meanwhile; *now untouched), or
 * STORE_ERROR with err: the write may or may not have happened.
 */
int store_ledger_write(struct store *s, const struct ledger *l, struct ledger *now, char *err, size_t errlen);

/* ---- reservation Leases: one per pod and node, owned by the pod ---- */

/*
 * Makes the pod's reservation Lease on node (e: its entry), or renews the
 * one there (a new version of it): STORE_OK or STORE_ERROR with err.
 */
int store_resv_put(struct store *s, const struct ledger_entry *e, const char *node, char *err, size_t errlen);
/* Reads it: STORE_OK with its uid and version, STORE_NONE, or STORE_ERROR. */
int store_resv_read(struct store *s, const char *ns, const char *uid, const char *node, char *lease_uid,
		    size_t usize, char *version, size_t vsize, char *err, size_t errlen);
/*
 * Deletes that very version of it (lease_uid and version as read): STORE_OK,
 * STORE_CONFLICT (renewed or made again since), STORE_NONE, or STORE_ERROR.
 */
int store_resv_delete(struct store *s, const char *ns, const char *uid, const char *node, const char *lease_uid,
		      const char *version, char *err, size_t errlen);

/* ---- gang locks: one per gang, with the plan its holder writes ---- */

struct store_lock {
	char id[64];                 /* the gang's id (ledger_gang_id) */
	char rv[64];                 /* its version */
	char holder[128];            /* "" when it names none */
	char gang[256];              /* "ns/gang", "" when it names none */
	int duration_s;              /* 0 when unreadable */
	int64_t end;                 /* when it expires (unix seconds; 0 when unreadable) */
	bool planned;                /* in holds its plan (else the plan is unreadable, or from before plans) */
	struct gang_intent in;
	void *own;                   /* the store's copy, for a write back */
};
/* Frees what a read or a create filled in (a zeroed one too). */
void store_lock_release(struct store_lock *l);
/*
 * Takes the gang's lock for timeout seconds, held by this replica, with the
 * plan in: STORE_OK with *out, STORE_CONFLICT when one exists, STORE_ERROR.
 */
int store_lock_create(struct store *s, const char *ns, const char *gang, const char *id, int timeout,
		      const struct gang_intent *in, struct store_lock *out, char *err, size_t errlen);
/* Reads the gang's lock: STORE_OK with *out, STORE_NONE, or STORE_ERROR. */
int store_lock_read(struct store *s, const char *id, struct store_lock *out, char *err, size_t errlen);
/*
 * Writes l back with its plan in state st, at l's version: STORE_OK (l is
 * then the new version), STORE_CONFLICT (it changed or went meanwhile), or
 * STORE_ERROR.
 */
int store_lock_set_state(struct store *s, struct store_lock *l, enum gang_plan_state st, char *err, size_t errlen);
/* Deletes the gang's lock if still at version rv ("": any); a failure is logged (it expires on its own). */
void store_lock_delete(struct store *s, const char *id, const char *rv);
/* Every gang's lock (a quorum read): *out (n of them; store_lock_free_all) or STORE_ERROR. */
int store_lock_list(struct store *s, struct store_lock **out, int *n, char *err, size_t errlen);
void store_lock_free_all(struct store_lock *locks, int n);

/* ---- watches ---- */

/* A watch sink that brings ev (which must outlive it) what it reads; for the ledgers, and the reservations. */
void store_ledger_sink(const struct store_ledger_events *ev, struct reflector_sink *out);
void store_resv_sink(const struct store_resv_events *ev, struct reflector_sink *out);
/*
 * Starts the ledger and reservation watches (added to cl), feeding
 * s->ledger_ev and s->resv_ev; out[0], out[1] are theirs (ready once listed).
 */
int store_watch_start(struct store *s, struct cluster *cl, int idle_timeout_s, struct reflector *out[2], char *err,
		      size_t errlen);

#endif
