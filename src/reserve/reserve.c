/* Cluster-mode binds: a reservation in the node's ledger, then the pod's binding. */
#include "reserve.h"
#include "binding.h"
#include "clock.h"
#include "events.h"
#include "jsonarena.h"
#include "log.h"
#include "metrics.h"
#include "reserve_edit.h"
#include "reserve_gang.h"
#include "status.h"
#include "store.h"
#include "update.h"
#include "watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Whether the pod watch follows the pod (then its deletion needs no
 * reservation Lease to be seen); with node, also the node it saw the pod
 * bound to ("" while unbound, or not followed).
 */
static bool pod_seen(struct reserve *r, const char *uid, char *node, size_t size)
{
	pthread_mutex_lock(&r->lock);
	const struct pod_state *p = keyset_get(&r->pods, uid);
	if (node)
		snprintf(node, size, "%s", p ? pod_str(p, POD_NODE) : "");
	pthread_mutex_unlock(&r->lock);
	return p != NULL;
}

/* GPUsAllocated on the pod: "node n1: GPUs 0,1 (GPU-3f2a..., GPU-77c1...)". */
static void tell_bound(struct reserve *r, const struct bind_request *req, const struct gpu_node *n,
		       const struct alloc *a, const char *ids)
{
	if (!events_wants(r->o.events, EVENTS_NORMAL))
		return;     /* nothing built on the bind's path for an Event not posted */
	char uuids[384] = "", share[64] = "";
	size_t len = 0;
	for (const char *p = ids; *p && len < sizeof(uuids);) {
		int i = n ? gpu_node_find_device(n, atoi(p)) : -1;
		if (i >= 0 && n->info[i].uuid && n->info[i].uuid[0])
			len += (size_t)snprintf(uuids + len, sizeof(uuids) - len, "%s%s", len ? ", " : "", n->info[i].uuid);
		p = strchr(p, ',');
		p = p ? p + 1 : "";
	}
	if (a->mode == CLAIM_SHARED)
		snprintf(share, sizeof(share), ", a share of %u MiB and %u%% of its cores", a->mem_mib, a->core / 10);
	events_pod(r->o.events, req->ns, req->name, req->uid, EVENTS_NORMAL, "GPUsAllocated", 0,
		   "node %s: GPU%s %s%s%s%s%s", req->node, strchr(ids, ',') ? "s" : "", ids, uuids[0] ? " (" : "",
		   uuids, uuids[0] ? ")" : "", share);
}

int reserve_edit_reserve(void *ctx, struct ledger *l, char *err, size_t errlen)
{
	struct bind_ctx *b = ctx;
	/* Decided again on each version (a 409 brings a fresh one): nothing from the last decision stays. */
	b->existed = false;
	b->took_place = false;
	memset(&b->entry, 0, sizeof(b->entry));
	int i = ledger_find(l, b->req->uid);
	if (i >= 0) {
		/* A retried bind (or a second scheduler's bind of the pod to this node):
		 * keep what was reserved, as a version of this try's (token and time),
		 * so that a release decided on the older version (the earlier try's
		 * own when its binding fails, or a reaper's) leaves it. */
		b->existed = true;
		l->e[i].a.since = clock_wall_s();
		l->e[i].a.token = b->token;
		b->entry = l->e[i];
		return LEDGER_WRITE;
	}
	/* A gang member takes over a place of its gang here (reserved for it, devices and all). */
	const struct claim *c = b->req->claim;
	for (int k = 0; c->gang[0] && k < l->n; k++) {
		struct ledger_entry *e = &l->e[k];
		if (!reserve_gang_can_take(b->r, b->node, e, b->req->ns, c))   /* its whole claim, on a Written plan */
			continue;
		snprintf(e->a.uid, sizeof(e->a.uid), "%s", b->req->uid);
		ledger_entry_set_pod(e, b->req->ns, b->req->name);
		e->a.since = clock_wall_s();
		e->a.token = b->token;
		b->entry = *e;
		b->took_place = true;
		return LEDGER_WRITE;
	}
	if (b->need_place) {
		/* Another member took the last place here meanwhile: filter sends it to one that is left. */
		snprintf(err, errlen, "node %s has no free place of gang %s/%s left", b->req->node, b->req->ns, c->gang);
		return -BIND_NO_FIT;
	}
	/* The node as this ledger version says it is used, then the policy's choice. */
	struct gpu_node *n = reserve_node_in_ledger(b->r, b->node, l);
	if (!n) {
		snprintf(err, errlen, "out of memory");
		return -BIND_ERROR;
	}
	struct fit f;
	double score;
	bool ok = policy_place(&b->req->policy, n, b->req->claim, &f, &score);
	if (!ok) {
		snprintf(err, errlen, "node %s no longer fits: %s", b->req->node, f.reason);
		gpu_node_free(n);
		return -BIND_NO_FIT;
	}
	int far = bind_alloc(&b->entry.a, b->req, n, &f, err, errlen);
	gpu_node_free(n);
	if (far)
		return -BIND_ERROR;
	b->entry.a.since = clock_wall_s();   /* (the clock every time of this module is read from) */
	b->entry.a.token = b->token;
	ledger_entry_set_pod(&b->entry, b->req->ns, b->req->name);
	snprintf(b->entry.claim, sizeof(b->entry.claim), "%s", b->req->claim->gpuclaim);
	if (ledger_add(l, &b->entry)) {
		snprintf(err, errlen, "out of memory");
		return -BIND_ERROR;
	}
	return LEDGER_WRITE;
}

struct unplace_ctx {
	const struct bind_ctx *b;
	bool unplaced;
};

/*
 * A bind that took a gang's place over failed: the entry becomes a place of
 * the gang again, while it is still this try's version (another try of the
 * pod may have made it its own since, and be binding the pod with it).
 */
static int edit_unplace(void *ctx, struct ledger *l, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	struct unplace_ctx *u = ctx;
	const struct bind_ctx *b = u->b;
	int i = ledger_find(l, b->req->uid);
	u->unplaced = false;
	bool ours = i >= 0 && !strcmp(l->e[i].gang, b->req->claim->gang) &&
		    resv_id_eq(resv_id_of(&l->e[i].a), resv_id_of(&b->entry.a));
	if (!ours)
		return LEDGER_UNCHANGED;
	u->unplaced = true;
	char id[17];
	ledger_gang_id(b->req->ns, b->req->claim->gang, id);
	snprintf(l->e[i].a.uid, sizeof(l->e[i].a.uid), LEDGER_PLACE_PREFIX "%s-r%.8s", id, b->req->uid);
	ledger_entry_set_pod(&l->e[i], b->req->ns, b->req->claim->gang);
	return LEDGER_WRITE;
}

/* A pod an earlier bind bound elsewhere (as the pod watch saw it): its binding would be refused; err says so. */
static bool bound_elsewhere(struct reserve *r, const struct bind_request *req, const char *pod, char *err,
			    size_t errlen)
{
	/* kube-scheduler gave up waiting on the first bind and placed the pod again; a pod's nodeName
	 * never changes once set: write nothing. */
	char bound[256];
	pod_seen(r, req->uid, bound, sizeof(bound));
	if (!bound[0] || !strcmp(bound, req->node))
		return false;
	snprintf(err, errlen, "pod %s is already assigned to node \"%s\" (seen by the pod watch; nothing written)", pod,
		 bound);
	return true;
}

/*
 * The binding, POSTed only while it can be answered before any replica may
 * call the reservation late (a reaper's bind timeout runs from when it first
 * sees the entry, after t0_ms, when this bind's ledger write began), so that
 * a bind does not outlast its reservation. One the API server carries out
 * later all the same is refused once the reaper fenced the pod (its
 * resourceVersion precondition: docs/architecture.md, "Fencing a late
 * binding"). Unposted and BINDING_REFUSED when less than a second is left.
 */
static int post_in_time(struct reserve *r, const struct bind_ctx *b, int64_t t0_ms, char *had, size_t hadsize,
			char *err, size_t errlen)
{
	int64_t spent_ms = clock_mono_ms() - t0_ms;
	int64_t left_s = ((int64_t)r->o.bind_timeout_s * 1000 - BINDING_MARGIN_MS - spent_ms) / 1000;
	if (left_s < 1) {
		snprintf(err, errlen, "the API server is too slow: the reservation took %.1f s of the %d s bind timeout, and a "
			 "binding now could outlast it", (double)spent_ms / 1000, r->o.bind_timeout_s);
		return BINDING_REFUSED;
	}
	return binding_post(r, b->req, b->node, &b->entry, left_s < BINDING_TIMEOUT_S ? (long)left_s : BINDING_TIMEOUT_S,
			    had, hadsize, err, errlen);
}

/*
 * A bind whose binding failed after its reservation was written: released
 * (a gang's place given back to the gang) unless the pod may be bound with
 * it all the same. err becomes why it failed.
 */
static void bind_failed(struct reserve *r, const struct bind_ctx *b, const char *pod, int posted, char *err,
			size_t errlen)
{
	const struct bind_request *req = b->req;
	char why[512], rel_err[256];
	unsigned char what = 0;
	snprintf(why, sizeof(why), "%s", err);
	if (posted == BINDING_UNKNOWN) {
		/* The pod may be bound here with these devices: released now, they could go to
		 * another pod as well. They stay until the pod is seen bound (then they are its),
		 * bound elsewhere, or not bound within the bind timeout (the reaper). */
		log_warn("the binding's outcome is unknown; its reservation stays for the reaper", "pod=%s node=%s error=\"%s\"",
			 pod, req->node, LOG_Q(why));
		snprintf(err, errlen, "%s (whether the pod was bound is unknown; its reservation stays until the bind timeout)",
			 why);
		return;
	}
	if (b->existed) {
		/* Another try of this bind made the reservation, and may have bound the pod
		 * meanwhile (kube-scheduler retries a bind that is still in flight here):
		 * released now, its GPUs could go to a second pod. The reaper decides. */
		log_warn("a retried bind failed; the reservation it found stays for the reaper", "pod=%s node=%s error=\"%s\"",
			 pod, req->node, LOG_Q(why));
		return;
	}
	const char *uid = req->uid;
	struct resv_id mine = resv_id_of(&b->entry.a);
	if (b->took_place) {
		/* Its gang's place goes back to the gang, not to everyone. */
		struct unplace_ctx u = { b, false };
		if (reserve_ledger_update(r, req->node, edit_unplace, &u, rel_err, sizeof(rel_err)) < 0)
			log_warn("cannot give a failed bind's place back to its gang now; the reaper will release it",
				 "pod=%s/%s gang=%s error=\"%s\"", req->ns, req->name, req->claim->gang, LOG_Q(rel_err));
		if (u.unplaced) {
			cache_lock(r->o.cache);
			cache_remove_alloc(r->o.cache, req->uid, req->node);
			cache_unlock(r->o.cache);
			reserve_delete_reservation(r, req->ns, req->uid, req->node);
		}
	} else if (reserve_release(r, req->node, &uid, &mine, 1, &what, rel_err, sizeof(rel_err))) {
		log_warn("cannot release a failed bind's reservation now; the reaper will", "pod=%s/%s error=\"%s\"",
			 req->ns, req->name, LOG_Q(rel_err));
	} else if (what == RESV_REMOVED) {
		metrics_inc(M_RELEASED, REL_BIND_FAILED);
	}
	reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Failed", req->node, "", pod, why);
}

/* A pod bound here that held a reservation elsewhere (a bind that failed half-way): that one goes now. */
static void release_moved(struct reserve *r, const struct bind_request *req, const struct alloc *old,
			  const char *where)
{
	const char *uid = req->uid;
	char rel_err[256];
	struct resv_id was = resv_id_of(old);
	unsigned char what = 0;
	if (reserve_release(r, where, &uid, &was, 1, &what, rel_err, sizeof(rel_err))) {
		log_warn("cannot release a moved pod's older reservation now; the reaper will", "pod=%s/%s node=%s error=\"%s\"",
			 req->ns, req->name, where, LOG_Q(rel_err));
		return;
	}
	if (what != RESV_REMOVED)
		return;     /* (gone already, or made again since) */
	metrics_inc(M_RELEASED, REL_BIND_FAILED);
	log_info("released a reservation", "pod=%s/%s node=%s reason=\"bound to %s instead\"", req->ns, req->name, where,
		 req->node);
}

/*
 * The bind with b->node (the node's devices) known: the reservation
 * written, then the pod's reservation Lease (a pod the pod watch does not
 * follow has no other record) and its binding; once bound, the pod's older
 * reservation (old, on node where; NULL: none) goes. A BIND_* code.
 */
static int reserve_then_bind(struct reserve *r, struct bind_ctx *b, const char *pod, const struct alloc *old,
			     const char *where, char *err, size_t errlen)
{
	const struct bind_request *req = b->req;
	int64_t t0_ms = clock_mono_ms();
	int rc = reserve_ledger_update(r, req->node, reserve_edit_reserve, b, err, errlen);
	if (rc < 0) {
		reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Failed", req->node, "", pod, err);
		return -rc;
	}
	/* Seen by this replica's filters at once; the ledger watch confirms it. */
	cache_lock(r->o.cache);
	cache_add_alloc(r->o.cache, req->node, &b->entry.a);
	cache_unlock(r->o.cache);
	char ids[256], had[512] = "";
	alloc_ids(&b->entry.a, ids, sizeof(ids));
	reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Reserved", req->node, ids, pod, "binding the pod");
	int posted = 0;
	if ((!pod_seen(r, req->uid, NULL, 0) && store_resv_put(&r->store, &b->entry, req->node, err, errlen)) ||
	    (posted = post_in_time(r, b, t0_ms, had, sizeof(had), err, errlen))) {
		bind_failed(r, b, pod, posted, err, errlen);
		return BIND_ERROR;
	}
	if (had[0])
		binding_adopt(r, req, &b->entry.a, b->token, b->node, had, ids, sizeof(ids));
	if (old)
		release_moved(r, req, old, where);
	reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Bound", req->node, ids, pod, "");
	if (b->took_place)
		reserve_gang_place_taken(r, req->ns, req->claim);
	log_info("reserved and bound", "pod=%s node=%s gpus=%s retried=%s gang=%s", pod, req->node, ids,
		 b->existed ? "yes" : "no", b->took_place ? req->claim->gang : "-");
	tell_bound(r, req, b->node, &b->entry.a, ids);
	return BIND_OK;
}

int reserve_bind(void *ctx, const struct bind_request *req, char *err, size_t errlen)
{
	struct reserve *r = ctx;
	char pod[320], had[8];
	if (!claim_wants_gpu(req->claim)) {
		int posted = binding_post(r, req, NULL, NULL, BINDING_TIMEOUT_S, had, sizeof(had), err, errlen);
		return posted ? BIND_ERROR : BIND_OK;
	}
	snprintf(pod, sizeof(pod), "%s/%s", req->ns, req->name);
	if (bound_elsewhere(r, req, pod, err, errlen))
		return BIND_ERROR;
	/* A pod holds GPUs on one node only: an older reservation elsewhere (a bind
	 * that failed half-way) goes once this bind succeeded, not before: until
	 * then the pod may be being bound there by another replica. */
	struct alloc old;
	char where[256];
	cache_lock(r->o.cache);
	bool moved = cache_find_alloc(r->o.cache, req->uid, &old, where, sizeof(where)) && strcmp(where, req->node);
	cache_unlock(r->o.cache);

	struct bind_ctx b = { .r = r, .req = req, .token = reserve_new_token(r) };
	/* A member of a gang not complete goes into a place, never beside the gang (all or none). */
	struct api_pod_ref self = { .ns = req->ns, .name = req->name, .uid = req->uid };
	b.need_place = req->claim->gang[0] && (reserve_gang_has_places(r, req->ns, req->claim->gang) ||
					       reserve_gang_incomplete(r, &self, req->claim));
	b.node = cache_clone_devices(r->o.cache, req->node);
	int rc = BIND_NO_FIT;
	if (!b.node) {
		snprintf(err, errlen, "node %s has no GpuNodeStatus", req->node);
		reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Failed", req->node, "", pod, err);
	} else {
		rc = reserve_then_bind(r, &b, pod, moved ? &old : NULL, where, err, errlen);
	}
	gpu_node_free(b.node);
	return rc;
}

int reserve_fetch_pod(void *ctx, const char *ns, const char *name, const char *uid,
		      struct claim *out, char *err, size_t errlen)
{
	struct reserve *r = ctx;
	char path[768], what[400];
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
	snprintf(what, sizeof(what), "reading pod %s/%s", ns, name);
	cJSON *pod = kube_get_object(r->o.client, path, what, err, errlen);
	if (!pod)
		return -1;
	int rc = -1;
	struct api_pod_ref ref;
	api_pod_ref(pod, &ref);
	if (uid[0] && strcmp(ref.uid, uid)) {
		snprintf(err, errlen, "pod %s/%s is not the one to bind (uid changed)", ns, name);
	} else {
		cache_claims_rdlock(r->o.cache);
		rc = api_pod_claim(pod, r->o.res, cache_gpuclaim_lookup, r->o.cache, out, err, errlen);
		cache_claims_unlock(r->o.cache);
	}
	jsonarena_delete(pod);
	return rc;
}
