/* The reaper, and the reservation module's lifecycle. */
#include "api.h"
#include "binding.h"
#include "clock.h"
#include "events.h"
#include "heap.h"
#include "log.h"
#include "metrics.h"
#include "podread.h"
#include "reserve_gang.h"
#include "status.h"
#include "store.h"
#include "update.h"
#include "watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GONE_MEMORY_S 600     /* how long a deleted pod's uid is remembered at most */
#define MAX_GETS_PER_PASS 200 /* pods outside the watch are looked up at most this often */
#define MAX_CHECKS_PER_PASS 1000   /* pods the watch lost sight of: looked up at most this often (the rest next pass) */

/* A reservation to look at: which pod, on which node. */
struct lookup {
	char node[254], uid[64], ns[64], pod[254], claim[254];
	struct resv_id id;        /* the entry's version, so that a reservation made again stays */
	bool late;                /* not bound within the bind timeout, as this replica measures it */
	char ids[256];            /* the entry's devices, "0,1" */
};

/* "0,1" of a packed entry's devices. */
static void rec_ids(const struct alloc_rec *e, char *out, size_t size)
{
	size_t len = 0;
	out[0] = '\0';
	for (int k = 0; k < e->ndev && len < size; k++)
		len += (size_t)snprintf(out + len, size - len, "%s%d", k ? "," : "", e->id_base + e->id_off[k]);
}

/* A reservation to release: a lookup plus the reason (its first member). */
struct release {
	struct lookup at;
	int reason;
};

struct repair {
	char node[254], uid[64], ns[64], pod[254], allocated[512], gpuclaim[254];
	enum claim_mode mode;
	uint32_t mem_mib, core;
};

/* A reservation Lease whose ledger entry is gone. */
struct stale_lease {
	char ns[64], uid[64], node[254], pod[254];
};

/* A new zeroed slot at the end of a growable array, or NULL when out of memory. */
static void *push(void *arrp, size_t *n, size_t *cap, size_t elem)
{
	void **arr = arrp;
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		void *p = realloc(*arr, nc * elem);
		if (!p)
			return NULL;
		*arr = p;
		*cap = nc;
	}
	void *slot = (char *)*arr + (*n)++ * elem;
	memset(slot, 0, elem);
	return slot;
}

static const char *const reason_names[] = { "pod deleted", "pod finished", "not bound in time", "bind failed",
					    "gang place unused in time", "pod bound to another node" };

/*
 * Why the reservation on node of a pod that still exists (as a fresh read
 * shows it) should go: the pod finished, is bound elsewhere, or was not
 * bound in time; -1: keep it.
 */
static int verdict(bool finished, const char *pod_node, const char *node, bool late)
{
	if (finished)
		return REL_POD_FINISHED;
	if (pod_node[0])
		return strcmp(pod_node, node) ? REL_POD_ELSEWHERE : -1;
	return late ? REL_BIND_TIMEOUT : -1;
}

/*
 * Whether a reservation is older than the bind timeout, as this replica
 * measures it: from when it first saw this version of the entry (its since
 * and token), on its own monotonic clock. The entry's since was written by
 * the clock of whichever replica bound, and a retried bind makes a new
 * version. Under r->lock.
 */
static bool entry_late(struct reserve *r, const char *node, const struct alloc_rec *e, uint32_t pass, int64_t now_ms,
		       int timeout_s)
{
	char key[64 + 256 + 2];
	snprintf(key, sizeof(key), "%s@%s", alloc_rec_uid(e), node);
	struct resv_id id = { e->since, e->token };
	struct entry_seen *x = strmap_get(&r->first_seen, key);
	if (!x) {
		if (!(x = malloc(sizeof(*x))) || strmap_put(&r->first_seen, key, x, NULL)) {
			free(x);
			return false;    /* out of memory: kept (never released early) */
		}
		x->first_ms = now_ms;
		x->id = id;
	}
	if (!resv_id_eq(x->id, id)) {
		x->id = id;
		x->first_ms = now_ms;
	}
	x->pass = pass;
	return now_ms - x->first_ms > (int64_t)timeout_s * 1000;
}

/*
 * Why a reservation (a kept ledger's entry, read in place; p its pod's
 * record, NULL when the pod watch has none) should go, from what the
 * watches tell; -1: keep, -2: look the pod up. The watches say for sure
 * only what cannot be undone (finished, bound to another node); a pod they
 * show unbound, or do not show, is read before its reservation goes.
 */
static int classify(struct reserve *r, const char *node, const struct alloc_rec *e, const struct pod_state *p,
		    time_t now, uint32_t pass, int64_t now_ms, bool *late)
{
	const char *uid = alloc_rec_uid(e);
	*late = false;
	/* A gang's place has no pod: it goes when no member took it in time. */
	if (ledger_uid_is_place(uid))
		return now - e->since > reserve_place_timeout(r, e->gang_timeout_s) ? REL_GANG_TIMEOUT : -1;
	if (strmap_get(&r->gone, uid))
		return REL_POD_GONE;    /* a fresh read said so */
	if (p && p->finished)
		return REL_POD_FINISHED;
	if (p && pod_str(p, POD_NODE)[0])
		return strcmp(pod_str(p, POD_NODE), node) ? REL_POD_ELSEWHERE : -1;
	*late = entry_late(r, node, e, pass, now_ms, r->o.bind_timeout_s);
	/* A reservation Lease that went, or a pod the watch lost sight of, is a hint, not proof: the
	 * garbage collector deletes the Lease with the pod, but so does a replica whose bind of the
	 * pod lost; the watch drops a pod whose label was taken off. */
	if (!p)
		return *late || strmap_get(&r->check, uid) ? -2 : -1;
	return *late ? -2 : -1;
}

/*
 * A pod alive and bound where its entry is, that the pod watch does not
 * follow (its managed label went): it gets the reservation Lease a bind
 * gives such a pod, so that stale_or_lost puts its entry back should the
 * ledger lose it. Once: a Lease the reservations watch shows is left alone.
 */
static void give_lease(struct reserve *r, const char *ns, const char *pod, const char *uid, const char *node,
		       const char *allocated)
{
	char name[128], key[256];
	ledger_reservation_name(uid, node, name, sizeof(name));
	snprintf(key, sizeof(key), "%s/%s", ns, name);
	pthread_mutex_lock(&r->lock);
	bool skip = keyset_get(&r->pods, uid) || strmap_get(&r->resv, key);
	pthread_mutex_unlock(&r->lock);
	struct ledger_entry e;
	memset(&e, 0, sizeof(e));
	if (skip || reserve_parse_allocated(allocated, node, &e.a))
		return;
	snprintf(e.a.uid, sizeof(e.a.uid), "%s", uid);
	ledger_entry_set_pod(&e, ns, pod);
	char err[256];
	if (store_resv_put(&r->store, &e, node, err, sizeof(err)))
		log_warn("reaper: cannot give an unwatched pod its reservation Lease", "pod=%s/%s node=%s error=\"%s\"", ns,
			 pod, node, LOG_Q(err));
	else
		log_info("gave an unwatched bound pod its reservation Lease", "pod=%s/%s node=%s", ns, pod, node);
}

/*
 * Pods the pod watch lost sight of (struct unwatched_pod), up to
 * MAX_GETS_PER_PASS a pass: a fresh read gives one alive, bound with its
 * annotation, a reservation Lease (its entry, if the ledger lost it, is put
 * back from there); one gone, finished or unbound is forgotten (a bind of
 * an unwatched pod gives it a Lease itself); one that cannot be read waits
 * for the next pass.
 */
static void look_unwatched(struct reserve *r)
{
	struct { char uid[64]; struct unwatched_pod u; } *todo = NULL;
	size_t n = 0, cap = 0;
	const char *key;
	void *val;
	pthread_mutex_lock(&r->lock);
	for (size_t pos = 0; n < MAX_GETS_PER_PASS && strmap_next(&r->unwatched, &pos, &key, &val);) {
		void *x = push(&todo, &n, &cap, sizeof(*todo));
		if (!x)
			break;
		snprintf(todo[n - 1].uid, sizeof(todo[n - 1].uid), "%s", key);
		todo[n - 1].u = *(struct unwatched_pod *)val;
	}
	pthread_mutex_unlock(&r->lock);
	for (size_t i = 0; i < n; i++) {
		const struct unwatched_pod *u = &todo[i].u;
		cJSON *pod;
		int alive = reserve_read_pod(r, u->ns, u->pod, todo[i].uid, &pod);
		if (alive > 0) {
			const char *node = api_str(api_path(pod, "spec"), "nodeName");
			const char *ann = api_pod_allocated(pod, NULL, 0);
			if (!api_pod_finished(pod) && node && node[0] && ann)
				give_lease(r, u->ns, u->pod, todo[i].uid, node, ann);
		}
		cJSON_Delete(pod);
		if (alive >= 0) {
			pthread_mutex_lock(&r->lock);
			free(strmap_del(&r->unwatched, todo[i].uid));
			pthread_mutex_unlock(&r->lock);
		}
	}
	free(todo);
}

/*
 * The pod's entry on node made to hold the devices of its annotation
 * allocated, which a fresh read just showed (any version of the entry; one
 * write). Devices another entry holds are not taken: both stay held.
 */
static void rewrite_entry(struct reserve *r, const char *ns, const char *pod, const char *uid, const char *node,
			  const char *allocated)
{
	struct adopt_ctx ac = { .r = r, .uid = uid, .token = reserve_new_token(r) };
	if (reserve_parse_allocated(allocated, node, &ac.want))
		return;
	struct gpu_node *devices = cache_clone_devices(r->o.cache, node);
	if (!devices)
		return;
	ac.devices = devices;
	char err[256] = "";
	int rc = reserve_ledger_update(r, node, reserve_edit_adopt, &ac, err, sizeof(err));
	if (rc == 0)
		log_warn("rewrote a reservation to the devices its pod was bound with", "pod=%s/%s allocated=%s", ns, pod,
			 allocated);
	else if (ac.clash)
		log_error("a bound pod's GPUs are reserved by another pod; both stay held, check the ledger",
			  "pod=%s/%s allocated=%s", ns, pod, allocated);
	else if (rc < 0)
		log_warn("cannot rewrite a reservation to its pod's devices now", "pod=%s/%s error=\"%s\"", ns, pod, LOG_Q(err));
	gpu_node_free(devices);
}

/*
 * Looks a pod up with a fresh read (a GET without resourceVersion is a quorum
 * read); the same answers as classify(), or -3 when it cannot. A pod found
 * gone is remembered as gone: its GPUs are free in the cache at once.
 */
static int classify_by_get(struct reserve *r, const struct lookup *l)
{
	cJSON *pod;
	int alive = reserve_read_pod(r, l->ns, l->pod, l->uid, &pod), reason = -3;
	bool settled = false;       /* nothing left for look_unwatched to do */
	if (!alive) {
		reason = REL_POD_GONE;  /* (or a new pod of the same name) */
	} else if (alive > 0) {
		const char *node = api_str(api_path(pod, "spec"), "nodeName");
		/* (a lookup for a deleted Lease may come before the timeout) */
		reason = verdict(api_pod_finished(pod), node ? node : "", l->node, l->late);
		/* Fenced first: a binding still in the API server could bind the pod with its devices. */
		const char *version = api_str(api_path(pod, "metadata"), "resourceVersion");
		if (reason == REL_BIND_TIMEOUT &&
		    (!version || reserve_fence_pod(r, l->ns, l->pod, l->uid, version, l->node)))
			reason = -3;
		const char *ann = api_pod_allocated(pod, NULL, 0);
		settled = reason == REL_POD_FINISHED || (reason == -1 && node && !strcmp(node, l->node) && ann);
		if (reason == -1 && settled)
			give_lease(r, l->ns, l->pod, l->uid, l->node, ann);
		/* bound here on other devices than its entry's (an unwatched pod's; fix_devices does the watched) */
		const char *ids = reason == -1 && settled ? alloc_ids_on(ann, l->node) : NULL;
		if (ids && strcmp(ids, l->ids))
			rewrite_entry(r, l->ns, l->pod, l->uid, l->node, ann);
	}
	cJSON_Delete(pod);
	pthread_mutex_lock(&r->lock);
	if (reason == REL_POD_GONE)
		reserve_mark_gone(r, l->uid);
	if (reason == REL_POD_GONE || settled)
		free(strmap_del(&r->unwatched, l->uid));
	pthread_mutex_unlock(&r->lock);
	return reason;
}

struct repair_ctx {
	struct reserve *r;
	const struct repair *p;
	struct gpu_node *devices;
	bool clash;
};

static int edit_repair(void *ctx, struct ledger *l, char *err, size_t errlen)
{
	struct repair_ctx *rc = ctx;
	const struct repair *p = rc->p;
	if (ledger_find(l, p->uid) >= 0)
		return LEDGER_UNCHANGED;
	struct ledger_entry e;
	memset(&e, 0, sizeof(e));
	snprintf(e.a.uid, sizeof(e.a.uid), "%s", p->uid);
	ledger_entry_set_pod(&e, p->ns, p->pod);
	snprintf(e.claim, sizeof(e.claim), "%s", p->gpuclaim);
	e.a.mode = p->mode;
	e.a.mem_mib = p->mode == CLAIM_SHARED ? p->mem_mib : 0;
	e.a.core = p->mode == CLAIM_SHARED ? p->core : 0;
	e.a.since = clock_wall_s();
	e.a.token = reserve_new_token(rc->r);
	if (reserve_parse_allocated(p->allocated, p->node, &e.a)) {
		snprintf(err, errlen, "pod %s/%s: bad %s annotation '%s'", p->ns, p->pod, ANN_ALLOCATED, p->allocated);
		return LEDGER_UNCHANGED;
	}
	/* Only when the devices are still free in this ledger version. */
	int fits = reserve_devices_free(rc->devices, l, -1, &e.a);
	rc->clash = fits == 0;
	if (fits <= 0) {
		snprintf(err, errlen, "devices %s of node %s are reserved by another pod", p->allocated, p->node);
		return LEDGER_UNCHANGED;
	}
	return ledger_add(l, &e) ? -BIND_ERROR : LEDGER_WRITE;
}

static void repair(struct reserve *r, const struct repair *p)
{
	struct repair_ctx rc = { r, p, cache_clone_devices(r->o.cache, p->node), false };
	char err[256] = "";
	if (!rc.devices)
		return;
	int res = reserve_ledger_update(r, p->node, edit_repair, &rc, err, sizeof(err));
	if (res == 0)
		log_warn("put back a reservation the ledger had lost", "pod=%s/%s node=%s allocated=%s", p->ns, p->pod,
			 p->node, p->allocated);
	else if (rc.clash)
		log_error("a bound pod's GPUs are reserved by another pod; check the ledger", "pod=%s/%s allocated=%s",
			  p->ns, p->pod, p->allocated);
	else if (res < 0 || err[0])
		log_warn("cannot put back a lost reservation", "pod=%s/%s error=\"%s\"", p->ns, p->pod, LOG_Q(err));
	gpu_node_free(rc.devices);
}

/*
 * A reservation Lease whose ledger entry is missing: left over, unless the
 * ledger lost the entry of a pod that is bound there (a pod outside the pod
 * watch has no other record of it). A fresh read of the pod decides: bound
 * to that node with its allocation annotation, the entry is put back as for
 * a watched pod and the Lease stays; gone, finished, unbound or elsewhere,
 * the Lease goes. A read that fails keeps it for the next pass.
 */
static void stale_or_lost(struct reserve *r, const struct stale_lease *l)
{
	cJSON *pod = NULL;
	int alive = l->pod[0] ? reserve_read_pod(r, l->ns, l->pod, l->uid, &pod) : 0;
	if (alive < 0)
		return;
	struct repair x;
	memset(&x, 0, sizeof(x));
	bool lost = false;
	if (alive && !api_pod_allocated(pod, NULL, 0) && api_annotation(pod, ANN_ALLOCATED)) {
		cJSON_Delete(pod);
		return;   /* an allocation of a newer format: kept, not judged */
	}
	if (alive) {
		const char *node = api_str(api_path(pod, "spec"), "nodeName"), *ann = api_pod_allocated(pod, NULL, 0);
		struct claim c;
		bool wants = reserve_pod_wants(r, pod, &c);
		lost = wants && !api_pod_finished(pod) && node && !strcmp(node, l->node) && ann && alloc_ids_on(ann, l->node);
		if (lost) {
			snprintf(x.node, sizeof(x.node), "%s", l->node);
			snprintf(x.uid, sizeof(x.uid), "%s", l->uid);
			snprintf(x.ns, sizeof(x.ns), "%s", l->ns);
			snprintf(x.pod, sizeof(x.pod), "%s", l->pod);
			snprintf(x.allocated, sizeof(x.allocated), "%s", ann);
			snprintf(x.gpuclaim, sizeof(x.gpuclaim), "%s", c.gpuclaim);
			x.mode = c.mode;
			x.mem_mib = c.mem_mib;
			x.core = c.core;
		}
		claim_release(&c);
	}
	cJSON_Delete(pod);
	if (lost)
		repair(r, &x);
	else
		reserve_delete_reservation(r, l->ns, l->uid, l->node);
}

/* ---- one pass ---- */

/*
 * The reservation module's lock, held a slice at a time: one hold for a
 * pass over 65,000 nodes' ledgers and 520,000 pods lasted 140 to 180 ms, and binds
 * and watch events wait for this lock.
 */
#define REAP_SLICE_NS 1000000   /* a hold lasts about this long at most (reserve_opts.reap_slice_ns) */
#define REAP_STEP 64            /* records walked between two looks at the clock */

struct hold {
	struct reserve *r;
	int64_t since_ns;         /* clock_mono_ns() when it took the lock */
	int64_t longest_ns;
	int n;
};

static void hold_take(struct hold *h)
{
	pthread_mutex_lock(&h->r->lock);
	h->since_ns = clock_mono_ns();
	h->n++;
}

static void hold_give(struct hold *h)
{
	int64_t ns = clock_mono_ns() - h->since_ns;
	if (ns > h->longest_ns)
		h->longest_ns = ns;
	pthread_mutex_unlock(&h->r->lock);
}

/* Lets the lock's other users in once this hold had its slice; true when it did. */
static bool hold_yield(struct hold *h)
{
	if (clock_mono_ns() - h->since_ns < h->r->o.reap_slice_ns)
		return false;
	hold_give(h);
	/* A waiter wakes on another core within microseconds; without a pause this thread would take the lock back first. */
	struct timespec pause = { 0, 20 * 1000 };
	nanosleep(&pause, NULL);
	hold_take(h);
	return true;
}

/* What a pass found to do once the lock is let go. */
struct pass {
	time_t now;
	int64_t now_ms;             /* clock_mono_ms() */
	bool more;                  /* lookups left for the next pass: run it soon */
	uint32_t id;                /* pod_state.held_in_pass */
	/*
	 * Which pods some ledger holds: a watched pod's record is marked with
	 * this pass, and the few others asked about (deleted pods, pods whose
	 * reservation Lease went) go in a small set. A set of every uid took
	 * 10 MiB at 520,000 pods, a copy of each 51.
	 */
	struct strmap held;
	struct release *rel;
	struct lookup *look;
	struct repair *rep;
	struct repair *fix;         /* entries whose devices differ from their pods' annotations */
	struct stale_lease *stale;
	size_t nrel, crel, nlook, clook, nrep, crep, nfix, cfix, nstale, cstale;
};

/*
 * Whether a watched pod, bound to node with its allocation annotation of
 * node, has an entry there with other devices (a retried bind's, say).
 */
static bool mismatched(const struct pod_state *p, const char *node, const struct alloc_rec *e)
{
	const char *want = pod_alloc_ids(p, node);
	if (p->finished || strcmp(pod_str(p, POD_NODE), node) || !want)
		return false;
	char ids[256];
	rec_ids(e, ids, sizeof(ids));
	return strcmp(ids, want) != 0;
}

static void note_fix(struct pass *ps, const struct pod_state *p)
{
	struct repair *x = push(&ps->fix, &ps->nfix, &ps->cfix, sizeof(*ps->fix));
	if (!x)
		return;
	snprintf(x->node, sizeof(x->node), "%s", pod_str(p, POD_NODE));
	snprintf(x->uid, sizeof(x->uid), "%s", pod_str(p, POD_UID));
	snprintf(x->ns, sizeof(x->ns), "%s", pod_str(p, POD_NS));
	snprintf(x->pod, sizeof(x->pod), "%s", pod_str(p, POD_NAME));
	pod_allocated(p, x->allocated, sizeof(x->allocated));
}

/*
 * An entry whose devices differ from its pod's annotation: the annotation is
 * the truth (the binding wrote it with spec.nodeName), and the entry is
 * rewritten to it in one write. That frees the entry's other devices, so a
 * fresh read of the pod must first confirm what the watch showed. Devices
 * another entry holds are not taken: both stay held, and an error is logged.
 */
static void fix_devices(struct reserve *r, const struct repair *x)
{
	cJSON *pod;
	if (reserve_read_pod(r, x->ns, x->pod, x->uid, &pod) <= 0)
		return;
	const char *node = api_str(api_path(pod, "spec"), "nodeName"), *ann = api_pod_allocated(pod, NULL, 0);
	bool confirmed = !api_pod_finished(pod) && node && !strcmp(node, x->node) && ann &&
			 !strcmp(ann, x->allocated);
	cJSON_Delete(pod);
	if (confirmed)
		rewrite_entry(r, x->ns, x->pod, x->uid, x->node, x->allocated);
}

/* Classifies every ledger entry; false when the walk could not finish (the ledgers' table grew meanwhile). */
static bool walk_ledgers(struct reserve *r, struct hold *h, struct pass *ps)
{
	unsigned rehashes = r->ledgers.rehashes;
	int walked = 0;
	const struct ledger_box *box;
	/* Each entry read where it lies: a pass reads every one. */
	for (size_t pos = 0; (box = keyset_next(&r->ledgers, &pos));) {
		const struct alloc_rec *e = ledger_packed_first(&box->p);
		for (int i = 0; i < box->p.n; i++, e = alloc_rec_next(e)) {
			const char *uid = alloc_rec_uid(e);
			struct pod_state *p = ledger_uid_is_place(uid) ? NULL : keyset_get(&r->pods, uid);
			if (p)
				p->held_in_pass = ps->id;
			else if (strmap_get(&r->gone, uid) || strmap_get(&r->check, uid))
				strmap_put(&ps->held, uid, (void *)1, NULL);
			if (p && mismatched(p, box->node, e))
				note_fix(ps, p);
			bool late;
			int why = classify(r, box->node, e, p, ps->now, ps->id, ps->now_ms, &late);
			struct lookup *x = NULL;
			if (why >= 0) {
				struct release *y = push(&ps->rel, &ps->nrel, &ps->crel, sizeof(*ps->rel));
				if (y)
					y->reason = why;
				x = y ? &y->at : NULL;
			} else if (why == -2) {
				bool hinted = strmap_get(&r->check, uid) != NULL;
				if (ps->nlook < (hinted ? MAX_CHECKS_PER_PASS : MAX_GETS_PER_PASS))
					x = push(&ps->look, &ps->nlook, &ps->clook, sizeof(*ps->look));
				else
					ps->more = ps->more || hinted;
			}
			if (x) {
				struct alloc_names names;
				alloc_rec_names(e, &names);
				snprintf(x->node, sizeof(x->node), "%s", box->node);
				snprintf(x->uid, sizeof(x->uid), "%s", uid);
				snprintf(x->ns, sizeof(x->ns), "%s", names.ns);
				snprintf(x->pod, sizeof(x->pod), "%s", names.name);
				snprintf(x->claim, sizeof(x->claim), "%s", names.claim);
				x->id = (struct resv_id){ e->since, e->token };
				x->late = late;
				rec_ids(e, x->ids, sizeof(x->ids));
			}
		}
		/* (between ledgers: box may be gone once the lock was let go) */
		if ((walked += box->p.n + 1) >= REAP_STEP) {
			walked = 0;
			if (hold_yield(h) && r->ledgers.rehashes != rehashes)
				return false;
		}
	}
	return true;
}

/* Bound pods whose annotation says they hold GPUs that no ledger records. */
static void walk_pods(struct reserve *r, struct hold *h, struct pass *ps)
{
	unsigned rehashes = r->pods.rehashes;
	size_t pos = 0, walked = 0;
	for (;;) {
		/* (before the next record: one read before the lock was let go may be gone) */
		if (++walked % REAP_STEP == 0 && hold_yield(h) && r->pods.rehashes != rehashes)
			return;   /* the rest next pass */
		const struct pod_state *p = keyset_next(&r->pods, &pos);
		if (!p)
			return;
		const char *uid = pod_str(p, POD_UID), *node = pod_str(p, POD_NODE);
		if (p->finished || !p->wants_gpu || !node[0] || !pod_alloc_ids(p, node) || p->held_in_pass == ps->id)
			continue;
		/* Not met in the walk: written to its ledger after the walk had passed it, or really lost. */
		const struct ledger_box *box = keyset_get(&r->ledgers, node);
		if (box && ledger_packed_holds(&box->p, uid))
			continue;
		struct repair *x = push(&ps->rep, &ps->nrep, &ps->crep, sizeof(*ps->rep));
		if (!x)
			return;
		snprintf(x->node, sizeof(x->node), "%s", node);
		snprintf(x->uid, sizeof(x->uid), "%s", uid);
		snprintf(x->ns, sizeof(x->ns), "%s", pod_str(p, POD_NS));
		snprintf(x->pod, sizeof(x->pod), "%s", pod_str(p, POD_NAME));
		pod_allocated(p, x->allocated, sizeof(x->allocated));
		snprintf(x->gpuclaim, sizeof(x->gpuclaim), "%s", pod_str(p, POD_GPUCLAIM));
		x->mode = p->mode;
		x->mem_mib = p->mem_mib;
		x->core = p->core;
	}
}

/*
 * Reservation Leases whose ledger entry is gone (a release whose answer was
 * lost, a Lease deletion that failed): nothing else deletes them while their
 * pods live. A bind writes the entry before the Lease: one older than the
 * bind timeout without its entry is left over. (Pods without the managed
 * label have one each: as many as the ledgers' entries, at most.)
 */
static void walk_leases(struct reserve *r, struct hold *h, struct pass *ps)
{
	unsigned rehashes = r->resv.rehashes;
	const char *key;
	void *val;
	for (size_t pos = 0, walked = 0; ps->nstale < MAX_GETS_PER_PASS;) {
		if (++walked % REAP_STEP == 0 && hold_yield(h) && r->resv.rehashes != rehashes)
			return;   /* the rest next pass */
		if (!strmap_next(&r->resv, &pos, &key, &val))
			return;
		const struct resv_lease *l = val;
		const struct ledger_box *box = keyset_get(&r->ledgers, l->node);
		if (ps->now - l->seen <= r->o.bind_timeout_s || (box && ledger_packed_holds(&box->p, l->uid)))
			continue;
		struct stale_lease *x = push(&ps->stale, &ps->nstale, &ps->cstale, sizeof(*ps->stale));
		if (!x)
			break;
		snprintf(x->ns, sizeof(x->ns), "%s", l->ns);
		snprintf(x->uid, sizeof(x->uid), "%s", l->uid);
		snprintf(x->node, sizeof(x->node), "%s", l->node);
		snprintf(x->pod, sizeof(x->pod), "%s", l->pod);
	}
}

/*
 * The deleted pods and Lease deletions no longer worth remembering, after
 * a whole walk of the ledgers (held knows every uid they hold). A bind
 * timeout's worth of deletions: one hold.
 */
static void forget(struct reserve *r, const struct pass *ps)
{
	const char *key;
	void *val;
	/* Lease deletions of pods that hold nothing any more, or are watched: nothing to look up (marks from
	 * after this pass began stay: their ledger may have been walked before their entry came). */
	for (size_t pos = 0; strmap_next(&r->check, &pos, &key, &val);)
		if ((time_t)(intptr_t)val < ps->now && (!strmap_get(&ps->held, key) || keyset_get(&r->pods, key)))
			strmap_del(&r->check, key);
	/*
	 * Forget a deleted pod once no ledger holds it and a bind of it in
	 * flight had its time (an entry that comes after that is looked up like
	 * any entry whose pod is not watched), or after GONE_MEMORY_S: under a
	 * steady churn of pods the set stays a bind timeout's worth, not ten
	 * minutes' worth.
	 */
	for (size_t pos = 0; strmap_next(&r->gone, &pos, &key, &val);) {
		time_t age = ps->now - (time_t)(intptr_t)val;
		if (age > GONE_MEMORY_S || (age > r->o.bind_timeout_s && !strmap_get(&ps->held, key)))
			strmap_del(&r->gone, key);
	}
	/* Reservations the walk did not meet waiting for a bind: released, or their pods bound. */
	for (size_t pos = 0; strmap_next(&r->first_seen, &pos, &key, &val);)
		if (((struct entry_seen *)val)->pass != ps->id)
			free(strmap_del(&r->first_seen, key));
}

/* The pods the walk could not decide on, read fresh; those to release join ps->rel. */
static void look_up(struct reserve *r, struct pass *ps)
{
	for (size_t i = 0; i < ps->nlook; i++) {
		int why = classify_by_get(r, &ps->look[i]);
		if (why < 0)    /* kept: shown held again if the watch's hint freed it in the cache */
			reserve_cache_hold_again(r, ps->look[i].node, ps->look[i].uid);
		if (why != -3) {
			/* Answered (marks from after this pass began stay, for the next one). */
			pthread_mutex_lock(&r->lock);
			void *when = strmap_get(&r->check, ps->look[i].uid);
			if (when && (time_t)(intptr_t)when < ps->now)
				strmap_del(&r->check, ps->look[i].uid);
			pthread_mutex_unlock(&r->lock);
		}
		struct release *y = why >= 0 ? push(&ps->rel, &ps->nrel, &ps->crel, sizeof(*ps->rel)) : NULL;
		if (!y)
			continue;
		y->at = ps->look[i];
		y->reason = why;
	}
}

/* Whether an earlier release of this pass was a place of the same gang (its members were told then). */
static bool gang_told(const struct pass *ps, size_t at)
{
	const struct release *x = &ps->rel[at];
	for (size_t j = 0; j < at; j++)
		if (ps->rel[j].reason == REL_GANG_TIMEOUT && !strcmp(ps->rel[j].at.ns, x->at.ns) &&
		    !strcmp(ps->rel[j].at.pod, x->at.pod))
			return true;
	return false;
}

/* GPUReservationReleased on a pod that is still there: why its GPUs went. */
static void tell_released(struct reserve *r, const struct release *x)
{
	if (x->reason == REL_POD_GONE || !x->at.pod[0])
		return;                     /* nobody to tell */
	events_pod(r->o.events, x->at.ns, x->at.pod, x->at.uid,
		   x->reason == REL_POD_FINISHED ? EVENTS_NORMAL : EVENTS_WARNING, "GPUReservationReleased", 0,
		   "node %s: GPUs %s released: %s", x->at.node, x->at.ids[0] ? x->at.ids : "-", reason_names[x->reason]);
}

/* Releases what the pass found to release: one ledger write per node for (up to 64 of) its releases. */
static void release_all(struct reserve *r, struct pass *ps)
{
	for (size_t i = 0; i < ps->nrel; i++) {
		if (!ps->rel[i].at.node[0])
			continue;
		const char *uids[64];
		struct resv_id ids[64];
		size_t idx[64];
		int n = 0;
		for (size_t j = i; j < ps->nrel && n < 64; j++) {
			if (ps->rel[j].at.node[0] && !strcmp(ps->rel[j].at.node, ps->rel[i].at.node)) {
				idx[n] = j;
				ids[n] = ps->rel[j].at.id;
				uids[n++] = ps->rel[j].at.uid;
			}
		}
		char err[256];
		unsigned char what[64];
		bool ok = !reserve_release(r, ps->rel[i].at.node, uids, ids, n, what, err, sizeof(err));
		if (!ok)
			log_warn("reaper: cannot release now; retrying next pass", "node=%s error=\"%s\"", ps->rel[i].at.node, LOG_Q(err));
		for (int k = 0; k < n; k++) {
			struct release *x = &ps->rel[idx[k]];
			/* (an entry reserved again since the pass looked, or gone already, was not released) */
			if (ok && what[k] == RESV_REMOVED) {
				metrics_inc(M_RELEASED, x->reason);
				log_info("released a reservation", "pod=%s/%s node=%s reason=\"%s\"", x->at.ns, x->at.pod,
					 x->at.node, LOG_Q(reason_names[x->reason]));
				char msg[128];
				snprintf(msg, sizeof(msg), "released: %s", reason_names[x->reason]);
				if (x->reason == REL_GANG_TIMEOUT) {   /* a place: at.pod is its gang */
					reserve_gang_status(r, x->at.ns, x->at.pod, x->at.claim, "TimedOut", 0, NULL,
							    "places no member took in time were released");
					if (!gang_told(ps, idx[k]))
						reserve_gang_timed_out(r, x->at.ns, x->at.pod, x->at.claim);
				} else {
					reserve_claim_status(r, x->at.ns, x->at.claim, "Pending", "", "", "", msg);
					tell_released(r, x);
				}
			}
			x->at.node[0] = '\0';
		}
	}
}

void reserve_reap(struct reserve *r)
{
	struct pass ps = { .now = (time_t)clock_wall_s(), .now_ms = clock_mono_ms() };
	strmap_init(&ps.held);
	struct hold h = { .r = r };
	int64_t began_ns = clock_mono_ns();
	hold_take(&h);
	ps.id = ++r->reap_passes;
	bool whole = walk_ledgers(r, &h, &ps);
	walk_pods(r, &h, &ps);
	walk_leases(r, &h, &ps);
	if (whole)
		forget(r, &ps);
	struct reap_stats st = { .holds = h.n, .whole = whole, .releases = (int)ps.nrel, .lookups = (int)ps.nlook,
				 .repairs = (int)ps.nrep };
	hold_give(&h);
	strmap_release(&ps.held);
	st.ms = (double)(clock_mono_ns() - began_ns) / 1e6;
	st.longest_hold_ms = (double)h.longest_ns / 1e6;
	pthread_mutex_lock(&r->lock);
	r->last_pass = st;
	pthread_mutex_unlock(&r->lock);
	log_debug("reaper pass walked the ledgers and pods",
		  "ms=%.1f longest_hold_ms=%.2f holds=%d whole=%d releases=%d lookups=%d repairs=%d", st.ms,
		  st.longest_hold_ms, st.holds, whole, st.releases, st.lookups, st.repairs);

	look_up(r, &ps);
	release_all(r, &ps);
	for (size_t i = 0; i < ps.nrep; i++)
		repair(r, &ps.rep[i]);
	for (size_t i = 0; i < ps.nfix; i++)
		fix_devices(r, &ps.fix[i]);
	look_unwatched(r);
	for (size_t i = 0; i < ps.nstale; i++)
		stale_or_lost(r, &ps.stale[i]);
	if (ps.more) {
		pthread_mutex_lock(&r->lock);
		reaper_kick(r);      /* more pods to look up than one pass does */
		pthread_mutex_unlock(&r->lock);
	}
	reserve_gang_reap(r, ps.now);
	free(ps.rel);
	free(ps.look);
	free(ps.rep);
	free(ps.fix);
	free(ps.stale);
}

void reserve_reap_stats(struct reserve *r, struct reap_stats *out)
{
	pthread_mutex_lock(&r->lock);
	*out = r->last_pass;
	pthread_mutex_unlock(&r->lock);
}

/* ---- lifecycle ---- */

static bool lists_ready(struct reserve *r)
{
	for (int i = 0; i < 3; i++)
		if (!r->watch[i] || !reflector_ready(r->watch[i]))
			return false;
	return true;
}

static void *reaper_main(void *arg)
{
	struct reserve *r = arg;
	while (!atomic_load(&r->stop)) {
		if (lists_ready(r)) {
			reserve_reap(r);
			if (!atomic_exchange(&r->reconciled, true))
				log_info("reservations rebuilt from the ledgers and the pods", "%s", "");
		}
		heap_trim_tick();   /* for a load that never lets the requests drain (heap.h) */
		/* Sleep a reap interval, or less when a pod went away or finished. */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += atomic_load(&r->reconciled) ? r->o.reap_interval_s : 1;
		pthread_mutex_lock(&r->lock);
		int rc = 0;
		while (!atomic_load(&r->stop) && !r->kicked && rc == 0)
			rc = pthread_cond_timedwait(&r->wake, &r->lock, &until);
		bool kicked = r->kicked;
		r->kicked = false;
		pthread_mutex_unlock(&r->lock);
		if (kicked && !atomic_load(&r->stop)) {
			/* let a burst of deletions gather into one pass (one ledger write per node) */
			struct timespec pause = { 0, 200 * 1000 * 1000 };
			nanosleep(&pause, NULL);
		}
	}
	return NULL;
}

static const char *pod_uid_of(const void *rec)
{
	return pod_str(rec, POD_UID);
}

static const char *box_node(const void *rec)
{
	return ((const struct ledger_box *)rec)->node;
}

struct reserve *reserve_new(const struct reserve_opts *o)
{
	struct reserve *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->o = *o;
	snprintf(r->ns, sizeof(r->ns), "%s", o->ns);
	snprintf(r->identity, sizeof(r->identity), "%s", o->identity);
	snprintf(r->selector, sizeof(r->selector), "%s", o->pod_selector ? o->pod_selector : "");
	r->o.ns = r->ns;
	r->o.identity = r->identity;
	r->o.pod_selector = r->selector;
	if (r->o.bind_timeout_s <= 0)
		r->o.bind_timeout_s = 60;
	if (r->o.reap_interval_s <= 0)
		r->o.reap_interval_s = 10;
	if (r->o.gang_timeout_s <= 0)
		r->o.gang_timeout_s = 300;
	if (r->o.reap_slice_ns <= 0)
		r->o.reap_slice_ns = REAP_SLICE_NS;
	pthread_mutex_init(&r->lock, NULL);
	pthread_mutex_init(&r->gang_lock, NULL);
	for (int i = 0; i < LEDGER_TURNS; i++) {
		pthread_mutex_init(&r->turns[i].lock, NULL);
		pthread_cond_init(&r->turns[i].done, NULL);
	}
	pthread_cond_init(&r->wake, NULL);
	keyset_init(&r->ledgers, box_node);
	keyset_init(&r->pods, pod_uid_of);
	strmap_init(&r->gone);
	strmap_init(&r->check);
	strmap_init(&r->first_seen);
	strmap_init(&r->unwatched);
	strmap_init(&r->resv);
	r->token_salt = (uint32_t)strmap_hash(r->identity);
	strmap_init(&r->gang_status);
	r->store = (struct store){ .client = o->client, .ns = r->ns, .identity = r->identity };
	reserve_watch_events(r);
	return r;
}

int reserve_start(struct reserve *r, struct cluster *cl, char *err, size_t errlen)
{
	if (store_watch_start(&r->store, cl, r->o.watch_idle_timeout_s, r->watch, err, errlen))
		return -1;
	struct reflector_opts pods = { .name = "pods", .resource = RES_PODS, .path = "/api/v1/pods",
				       .label_selector = r->selector, .idle_timeout_s = r->o.watch_idle_timeout_s };
	reserve_pod_sink(r, &pods.sink);
	r->watch[2] = reflector_start(r->o.client, &pods, err, errlen);
	if (!r->watch[2] || cluster_add(cl, r->watch[2]))
		return -1;
	if (pthread_create(&r->reaper, NULL, reaper_main, r)) {
		snprintf(err, errlen, "cannot start the reaper thread");
		return -1;
	}
	r->reaper_started = true;
	return 0;
}

bool reserve_ready(struct reserve *r)
{
	return atomic_load(&r->reconciled);
}

void reserve_stop(struct reserve *r)
{
	if (!r || !r->reaper_started)
		return;
	atomic_store(&r->stop, true);
	pthread_mutex_lock(&r->lock);
	pthread_cond_broadcast(&r->wake);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->reaper, NULL);
	r->reaper_started = false;
}

void reserve_free(struct reserve *r)
{
	if (!r)
		return;
	reserve_stop(r);
	const char *key;
	void *val;
	struct ledger_box *box;
	for (size_t pos = 0; (box = keyset_next(&r->ledgers, &pos));) {
		ledger_packed_release(&box->p);
		free(box);
	}
	for (size_t pos = 0; (val = keyset_next(&r->pods, &pos));)
		free(val);
	keyset_release(&r->ledgers);
	keyset_release(&r->pods);
	strmap_release(&r->gone);
	for (size_t pos = 0; strmap_next(&r->gang_status, &pos, &key, &val);)
		free(val);
	for (size_t pos = 0; strmap_next(&r->resv, &pos, &key, &val);)
		free(val);
	for (size_t pos = 0; strmap_next(&r->first_seen, &pos, &key, &val);)
		free(val);
	strmap_release(&r->first_seen);
	for (size_t pos = 0; strmap_next(&r->unwatched, &pos, &key, &val);)
		free(val);
	strmap_release(&r->unwatched);
	strmap_release(&r->check);
	strmap_release(&r->resv);
	strmap_release(&r->gang_status);
	reserve_gang_free(r);
	pthread_mutex_destroy(&r->lock);
	pthread_mutex_destroy(&r->gang_lock);
	for (int i = 0; i < LEDGER_TURNS; i++) {
		pthread_mutex_destroy(&r->turns[i].lock);
		pthread_cond_destroy(&r->turns[i].done);
	}
	pthread_cond_destroy(&r->wake);
	free(r);
}
