/*
 * reserve: cluster-mode binds through atomic reservations (ledger.h), and
 * the reaper that releases reservations nobody uses any more.
 *
 * Bind: choose devices against the node's ledger as just read, write the
 * ledger with its resourceVersion (a 409 means another replica won: read
 * again and decide again, a bounded number of times), create the pod's
 * reservation Lease, then POST the pod's binding with the allocation
 * annotations, which the API server stores with spec.nodeName in one
 * write. Any failure after the ledger write releases the reservation.
 *
 * Reaper: every reap interval, releases the reservations of pods that are
 * gone, finished (Succeeded/Failed), bound elsewhere, or not bound within
 * the bind timeout; and puts back reservations of bound pods (from their
 * allocation annotation) that a ledger lost. The watches' word is final only
 * for what cannot be undone (finished, bound elsewhere): a pod the pod watch
 * dropped (deleted, or only its label taken off), a reservation Lease that
 * went, or a pod still shown unbound past the bind timeout is read (a GET,
 * served with a quorum read) before anything is released. The bind timeout
 * counts on this replica's monotonic clock from when it first saw the entry.
 */
#ifndef GPU_RESERVE_H
#define GPU_RESERVE_H

#include "api.h"
#include "bind.h"
#include "cache.h"
#include "cluster.h"
#include "kube.h"

struct events;

struct reserve_opts {
	struct kube_client *client;
	struct cache *cache;
	const struct api_resources *res;
	const char *ns;               /* namespace of the ledger Leases */
	const char *identity;         /* this replica, in the ledgers' holderIdentity */
	int bind_timeout_s;           /* measured on this replica's monotonic clock from when it first saw the entry */
	int watch_idle_timeout_s;     /* its watches: silent this long, listed again (reflector_opts.idle_timeout_s) */
	int reap_interval_s;
	const char *pod_selector;     /* label selector of pods that hold GPUs */
	int gang_timeout_s;           /* a gang's places unused this long go (default for gangs without one) */
	const char *gang_topology_key;   /* node label whose values are the topology domains gangs keep to */
	int64_t reap_slice_ns;        /* the longest a reaper pass holds the lock at once (0: 1 ms; tests: less) */
	/*
	 * Where the module's Events go (include/events.h; NULL: none): the
	 * devices bound, reservations the reaper releases, gangs waiting and
	 * timed out. Only queued: no bind or reaper pass waits on them.
	 */
	struct events *events;
};

struct reserve;

struct reserve *reserve_new(const struct reserve_opts *o);
/* Starts the ledger, reservation and pod watches (added to cl) and the reaper. */
int reserve_start(struct reserve *r, struct cluster *cl, char *err, size_t errlen);
/* True once the reaper reconciled the ledgers with the pods after the first lists. */
bool reserve_ready(struct reserve *r);
void reserve_stop(struct reserve *r);
void reserve_free(struct reserve *r);

/* extender_bind_fn and extender_fetch_fn for cluster mode; ctx is the struct reserve. */
int reserve_bind(void *ctx, const struct bind_request *req, char *err, size_t errlen);
int reserve_fetch_pod(void *ctx, const char *ns, const char *name, const char *uid,
		      struct claim *out, char *err, size_t errlen);
/* extender_gang_fn for cluster mode (reserve_gang.c); ctx is the struct reserve. */
void reserve_gang_route(void *ctx, const struct api_pod_ref *pod, const struct claim *c,
			const struct gpu_node *const *nodes, int n, struct gang_route *out);

/* What the ledger, reservation and pod watches apply (reserve_start feeds them; benches may too). */
void reserve_ledger_sink(struct reserve *r, struct reflector_sink *out);
void reserve_reservation_sink(struct reserve *r, struct reflector_sink *out);
void reserve_pod_sink(struct reserve *r, struct reflector_sink *out);
/* Runs one reaper pass now (tests and the first reconcile). */
void reserve_reap(struct reserve *r);

/*
 * The last pass's walk over the ledgers and pods, which holds the
 * reservation module's lock (binds and watch events wait for it) a slice
 * at a time.
 */
struct reap_stats {
	double ms;                /* the walk, start to end */
	double longest_hold_ms;   /* the longest it held the lock at once */
	int holds;                /* how many times it took the lock */
	bool whole;               /* it walked every ledger (false: their table grew meanwhile) */
	int releases, lookups, repairs;   /* what it found to do */
};
void reserve_reap_stats(struct reserve *r, struct reap_stats *out);

#endif
