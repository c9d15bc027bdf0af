/* Cluster-mode reservation: the ledger writes, the bind, the watches it needs. */
#include "reserve.h"
#include "clock.h"
#include "jsonarena.h"
#include "ledger.h"
#include "log.h"
#include "metrics.h"
#include "reserve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ATTEMPTS 8

/* ---- ledger writes -------------------------------------------------------- */

static void ledger_path(const struct reserve *r, const char *node, char *out, size_t size)
{
	char name[LEDGER_NAME_MAX + 20];
	ledger_lease_name(node, name, sizeof(name));
	snprintf(out, size, "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", r->o.ns, name);
}

/* A short random pause between conflicting writes, so racing replicas spread out. */
static void conflict_pause(int attempt)
{
	unsigned seed = (unsigned)clock_wall_s() ^ (unsigned)(uintptr_t)&attempt ^ (unsigned)attempt;
	clock_sleep_us(1000 + rand_r(&seed) % (2000 << (attempt < 5 ? attempt : 5)));
}

/* The ledger Lease an API response carries (a read's or a write's). */
static int ledger_of_response(const struct kube_response *resp, const char *node, struct ledger *l,
			      char *err, size_t errlen)
{
	cJSON *obj = cJSON_ParseWithLength(resp->body.data, resp->body.len);
	int bad = !obj || ledger_decode(obj, l, err, errlen);
	jsonarena_delete(obj);   /* during /bind the tree is the request arena's */
	if (!obj)
		snprintf(err, errlen, "the ledger of %s is not JSON", node);
	return bad ? -1 : 0;
}

/* The node's ledger as the API server has it now (rv "" when there is none). */
static int read_ledger(struct reserve *r, const char *node, const char *path, struct ledger *l,
		       struct kube_response *resp, char *err, size_t errlen)
{
	char msg[256];
	if (kube_request(r->o.client, "GET", path, NULL, NULL, 10, resp, err, errlen))
		return -1;
	if (resp->status == 404) {
		ledger_init(l, node);
		return 0;
	}
	if (resp->status != 200) {
		snprintf(err, errlen, "reading the ledger of %s: HTTP %ld: %s", node, resp->status,
			 kube_status_message(resp, msg, sizeof(msg)));
		return -1;
	}
	return ledger_of_response(resp, node, l, err, errlen);
}

/* One caller's edit of a node's ledger: its own turn, or a ride in another's. */
struct ledger_job {
	const char *node;
	ledger_edit_fn edit;
	void *ctx;
	char *err;
	size_t errlen;
	int rc;                 /* its edit's decision, then its result */
	bool done;
	struct ledger_job *next;
};

/* One job's result: failed, with why. */
static void job_fail(struct ledger_job *j, int rc, const char *err)
{
	j->rc = rc;
	snprintf(j->err, j->errlen, "%s", err);
}

/* Sets the result of every job that wanted a write (the others keep their decision). */
static void writers_fail(struct ledger_job *jobs, int rc, const char *err)
{
	for (struct ledger_job *j = jobs; j; j = j->next)
		if (j->rc == LEDGER_WRITE)
			job_fail(j, rc, err);
}

/*
 * The jobs' edits in one write. First on the ledger as watched (or as we
 * last wrote it), which saves a read: the write's resourceVersion still
 * checks it. Only decisions to write are taken on that copy; when an edit
 * decides anything else, all decide again on a fresh read.
 */
static void write_ledger(struct reserve *r, const char *node, struct ledger_job *jobs)
{
	char path[1200], msg[256], err[512];
	ledger_path(r, node, path, sizeof(path));
	struct kube_response resp;
	kube_response_init(&resp);
	struct buf body;
	buf_init(&body, (size_t)2 << 20);
	bool known = true;
	for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
		struct ledger l;
		known = known && reserve_known_ledger(r, node, &l);
		if (!known && read_ledger(r, node, path, &l, &resp, err, sizeof(err))) {
			for (struct ledger_job *j = jobs; j; j = j->next)
				job_fail(j, -BIND_ERROR, err);
			goto out;
		}
		int writes = 0, others = 0;
		for (struct ledger_job *j = jobs; j; j = j->next) {
			j->rc = j->edit(j->ctx, &l, j->err, j->errlen);
			j->rc == LEDGER_WRITE ? writes++ : others++;
		}
		if (known && others) {
			ledger_release(&l);
			known = false;
			attempt--;
			continue;
		}
		if (!writes) {
			ledger_release(&l);
			goto out;
		}
		buf_clear(&body);
		ledger_encode(&l, r->o.ns, r->o.identity, &body);
		bool create = !l.rv[0];
		ledger_release(&l);
		char url[1200];
		if (create)
			snprintf(url, sizeof(url), "/apis/coordination.k8s.io/v1/namespaces/%s/leases", r->o.ns);
		if (kube_request(r->o.client, create ? "POST" : "PUT", create ? url : path, buf_cstr(&body), NULL,
				 10, &resp, err, sizeof(err))) {
			writers_fail(jobs, -BIND_ERROR, err);
			goto out;
		}
		if (resp.status == 200 || resp.status == 201) {
			/* The next turn starts from what was written, not from a read. */
			if (!ledger_of_response(&resp, node, &l, err, sizeof(err)))
				reserve_ledger_written(r, node, &l);
			goto out;                    /* each writer's rc is LEDGER_WRITE: 0 */
		}
		if (resp.status == 409 || (resp.status == 404 && !create)) {
			/* Someone else wrote first (or created it, or deleted it): read again, decide again. */
			metrics_inc(M_RESERVE_CONFLICTS, 0);
			/* Only a conflict between replicas needs a pause; a stale watched copy does not. */
			if (!known)
				conflict_pause(attempt + 1);
			known = false;
			continue;
		}
		snprintf(err, sizeof(err), "writing the ledger of %s: HTTP %ld: %s", node, resp.status,
			 kube_status_message(&resp, msg, sizeof(msg)));
		writers_fail(jobs, -BIND_ERROR, err);
		goto out;
	}
	snprintf(err, sizeof(err), "gave up after %d conflicting writes to the ledger of %s", MAX_ATTEMPTS, node);
	writers_fail(jobs, -BIND_CONFLICT, err);
out:
	buf_release(&body);
	kube_response_release(&resp);
}

int reserve_ledger_update(struct reserve *r, const char *node, ledger_edit_fn edit, void *ctx,
			  char *err, size_t errlen)
{
	struct ledger_job me = { .node = node, .edit = edit, .ctx = ctx, .err = err, .errlen = errlen };
	struct ledger_turns *t = &r->turns[strmap_hash(node) % LEDGER_TURNS];
	pthread_mutex_lock(&t->lock);
	struct ledger_job **end = &t->queue;   /* in the order they came */
	while (*end)
		end = &(*end)->next;
	*end = &me;
	while (!me.done && t->busy)
		clock_cond_wait(&t->done, &t->lock);
	if (me.done) {
		/* An earlier turn wrote our edit with its own. */
		pthread_mutex_unlock(&t->lock);
		return me.rc;
	}
	/* Our turn: take along every edit of this node that is waiting. */
	t->busy = true;
	struct ledger_job *batch = NULL, **tail = &batch;
	for (struct ledger_job **pp = &t->queue; *pp;) {
		struct ledger_job *j = *pp;
		if (strcmp(j->node, node)) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		j->next = NULL;
		*tail = j;
		tail = &j->next;
	}
	pthread_mutex_unlock(&t->lock);
	write_ledger(r, node, batch);
	pthread_mutex_lock(&t->lock);
	t->busy = false;
	for (struct ledger_job *j = batch, *next; j; j = next) {
		next = j->next;          /* j may be gone once done is set */
		j->done = true;
	}
	pthread_cond_broadcast(&t->done);
	pthread_mutex_unlock(&t->lock);
	return me.rc;
}

/* Removes the pods' entries from a ledger. */
int reserve_edit_remove(void *ctx, struct ledger *l, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	struct remove_ctx *rc = ctx;
	int removed = 0;
	for (int k = 0; k < rc->n; k++) {
		int i = ledger_find(l, rc->uids[k]);
		rc->what[k] = 0;
		if (i < 0)
			continue;
		if (rc->ids && (l->e[i].a.since != rc->ids[k].since || l->e[i].a.token != rc->ids[k].token)) {
			rc->what[k] = RESV_KEPT;    /* another try's, or reserved again since the caller looked */
			continue;
		}
		snprintf(rc->ns[k], sizeof(rc->ns[k]), "%s", l->e[i].ns);
		ledger_remove_at(l, i);
		rc->what[k] = RESV_REMOVED;
		removed++;
	}
	return removed ? LEDGER_WRITE : LEDGER_UNCHANGED;
}

int reserve_ledger_holds(struct reserve *r, const char *node, const char *uid)
{
	char path[1200], err[256];
	ledger_path(r, node, path, sizeof(path));
	struct kube_response resp;
	kube_response_init(&resp);
	struct ledger l;
	int holds = -1;
	if (!read_ledger(r, node, path, &l, &resp, err, sizeof(err))) {
		holds = ledger_find(&l, uid) >= 0;
		ledger_release(&l);
	}
	kube_response_release(&resp);
	return holds;
}

/*
 * Whether a release whose ledger write failed went through all the same (a
 * reset or a timeout after the request went out): every entry it removed is
 * gone from the ledger as the API server has it now. Then their reservation
 * Leases must go too: nothing else deletes them while their pods live.
 */
static bool released_anyway(struct reserve *r, const char *node, const char *const *uids, const unsigned char *what,
			    int n)
{
	char path[1200], err[256];
	ledger_path(r, node, path, sizeof(path));
	struct kube_response resp;
	kube_response_init(&resp);
	struct ledger l;
	bool gone = false, decided = false;
	/* (an update that failed before its edit ran, a read refused, decided nothing: not gone) */
	for (int k = 0; k < n; k++)
		decided = decided || what[k] == RESV_REMOVED;
	if (decided && !read_ledger(r, node, path, &l, &resp, err, sizeof(err))) {
		gone = true;
		for (int k = 0; k < n; k++)
			if (what[k] == RESV_REMOVED && ledger_find(&l, uids[k]) >= 0)
				gone = false;
		ledger_release(&l);
	}
	kube_response_release(&resp);
	return gone;
}

int reserve_release(struct reserve *r, const char *node, const char *const *uids, const struct resv_id *ids, int n,
		    char *err, size_t errlen)
{
	unsigned char *what = calloc((size_t)n + 1, 1);
	char (*ns)[64] = calloc((size_t)n + 1, sizeof(*ns));
	if (!what || !ns) {
		free(what);
		free(ns);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	struct remove_ctx rc = { uids, ids, what, ns, n };
	int res = reserve_ledger_update(r, node, reserve_edit_remove, &rc, err, errlen);
	if (res < 0 && released_anyway(r, node, uids, what, n)) {
		log_info("a release went through; its answer was lost", "node=%s error=\"%s\"", node, LOG_Q(err));
		res = 0;
	}
	if (res >= 0) {
		/* This node's records only: the pod may hold a newer reservation elsewhere. */
		cache_lock(r->o.cache);
		for (int k = 0; k < n; k++)
			if (what[k] == RESV_REMOVED)
				cache_remove_alloc(r->o.cache, uids[k], node);
		cache_unlock(r->o.cache);
		for (int k = 0; k < n; k++)
			if (what[k] == RESV_REMOVED && strncmp(uids[k], LEDGER_PLACE_PREFIX, sizeof(LEDGER_PLACE_PREFIX) - 1))
				reserve_delete_reservation(r, ns[k], uids[k], node);
	}
	free(what);
	free(ns);
	return res < 0 ? -1 : 0;
}

/* ---- reservation Leases and GpuClaim status -------------------------------- */

/*
 * Deletes the pod's reservation Lease on the node once its reservation there
 * is gone: read the Lease, then the ledger, then delete that very version of
 * the Lease (uid and resourceVersion preconditions). A retried bind of the pod
 * writes its ledger entry before it makes or renews the Lease, so either the
 * ledger read sees the entry (the Lease stays) or the renewal changed the
 * version (the delete fails) or came after (it makes the Lease again).
 */
void reserve_delete_reservation(struct reserve *r, const char *ns, const char *uid, const char *node)
{
	/* Named after the pod and the node: a racing bind of the pod elsewhere has its own. */
	char name[128], path[512], err[256] = "", body[256], lease_uid[64] = "", version[32] = "";
	ledger_reservation_name(uid, node, name, sizeof(name));
	snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns, name);
	struct kube_response resp;
	kube_response_init(&resp);
	if (kube_request(r->o.client, "GET", path, NULL, NULL, 10, &resp, err, sizeof(err)) ||
	    (resp.status != 200 && resp.status != 404))
		goto failed;
	if (resp.status == 404)
		goto done;
	cJSON *lease = cJSON_ParseWithLength(resp.body.data, resp.body.len);
	const cJSON *md = api_path(lease, "metadata");
	snprintf(lease_uid, sizeof(lease_uid), "%s", api_str(md, "uid") ? api_str(md, "uid") : "");
	snprintf(version, sizeof(version), "%s", api_str(md, "resourceVersion") ? api_str(md, "resourceVersion") : "");
	jsonarena_delete(lease);   /* during /bind the tree is the request arena's */
	kube_response_release(&resp);
	kube_response_init(&resp);
	int holds = reserve_ledger_holds(r, node, uid);
	if (holds > 0)
		goto done;      /* reserved there again: the Lease is the new reservation's */
	if (holds < 0 || !lease_uid[0] || !version[0]) {
		snprintf(err, sizeof(err), "%s", holds < 0 ? "cannot read the ledger" : "a Lease without uid or version");
		goto failed;
	}
	snprintf(body, sizeof(body),
		 "{\"apiVersion\":\"v1\",\"kind\":\"DeleteOptions\",\"preconditions\":{\"uid\":\"%s\",\"resourceVersion\":\"%s\"}}",
		 lease_uid, version);
	/* 409: renewed or made again since it was read, by a bind of the pod here. */
	if (kube_request(r->o.client, "DELETE", path, body, NULL, 10, &resp, err, sizeof(err)) ||
	    (resp.status >= 300 && resp.status != 404 && resp.status != 409))
		goto failed;
	if (resp.status < 300)
		log_debug("deleted a reservation Lease", "lease=%s/%s node=%s", ns, name, node);
	goto done;
failed:
	log_warn("cannot delete a reservation Lease now (the reaper will, or the garbage collector with the pod)",
		 "lease=%s/%s status=%ld error=\"%s\"", ns, name, resp.status, LOG_Q(err));
done:
	kube_response_release(&resp);
}

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

/*
 * Creates the pod's reservation Lease on the node, or renews the one an
 * earlier try of this very bind made (409). Renewing changes its
 * resourceVersion: a reaper that took it for left over (its fresh read of
 * the ledger came before this bind's entry) deletes only the version it saw,
 * so its delete fails rather than take this reservation's Lease. A Lease the
 * reaper deleted first (404 on the renewal) is made again.
 */
int reserve_create_reservation(struct reserve *r, const struct ledger_entry *e, const char *node, char *err,
			       size_t errlen)
{
	struct buf body;
	buf_init(&body, 1 << 16);
	ledger_encode_reservation(e, node, &body);
	char path[512], name[128], msg[256], now[40], renew[96];
	ledger_reservation_name(e->a.uid, node, name, sizeof(name));
	int rc = -1;
	for (int attempt = 0; attempt < 3; attempt++) {
		struct kube_response resp;
		kube_response_init(&resp);
		snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases", e->ns);
		rc = kube_request(r->o.client, "POST", path, buf_cstr(&body), NULL, 10, &resp, err, errlen);
		long status = resp.status;
		if (!rc && status == 409) {
			kube_response_release(&resp);
			kube_response_init(&resp);
			snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", e->ns, name);
			ledger_microtime(now, sizeof(now));
			snprintf(renew, sizeof(renew), "{\"spec\":{\"renewTime\":\"%s\"}}", now);
			rc = kube_request(r->o.client, "PATCH", path, renew, "application/merge-patch+json", 10, &resp, err,
					  errlen);
			status = resp.status;
			if (!rc && status == 404) {
				kube_response_release(&resp);
				continue;       /* deleted meanwhile: make it again */
			}
		}
		if (!rc && status != 201 && status != 200) {
			snprintf(err, errlen, "creating the reservation Lease: HTTP %ld: %s", status,
				 kube_status_message(&resp, msg, sizeof(msg)));
			rc = -1;
		}
		kube_response_release(&resp);
		break;
	}
	buf_release(&body);
	return rc;
}

void reserve_claim_status(struct reserve *r, const char *ns, const char *claim, const char *phase,
			  const char *node, const char *ids, const char *pod, const char *message)
{
	if (!claim || !claim[0])
		return;
	char path[768], now[40], what[400];
	snprintf(path, sizeof(path), "/apis/gpu.scheduling/v1/namespaces/%s/gpuclaims/%s/status", ns, claim);
	snprintf(what, sizeof(what), "GpuClaim %s/%s", ns, claim);
	reserve_status_time(now, sizeof(now));
	struct buf body;
	buf_init(&body, 1 << 16);
	buf_printf(&body, "{\"status\":{\"phase\":\"%s\",\"nodeName\":", phase);
	buf_add_json_str(&body, node ? node : "");
	buf_adds(&body, ",\"gpuIds\":");
	buf_add_json_str(&body, ids ? ids : "");
	buf_adds(&body, ",\"pod\":");
	buf_add_json_str(&body, pod ? pod : "");
	buf_adds(&body, ",\"message\":");
	buf_add_json_str(&body, message ? message : "");
	buf_printf(&body, ",\"lastTransitionTime\":\"%s\"}}", now);
	reserve_patch_status(r, path, buf_cstr(&body), what);
	buf_release(&body);
}

void reserve_status_time(char *out, size_t size)
{
	ledger_microtime(out, size);
	if (size > 20) {
		out[19] = 'Z';     /* date-time, whole seconds */
		out[20] = '\0';
	}
}

void reserve_patch_status(struct reserve *r, const char *path, const char *body, const char *what)
{
	char err[256] = "";
	struct kube_response resp;
	kube_response_init(&resp);
	if (kube_request(r->o.client, "PATCH", path, body, "application/merge-patch+json", 10, &resp, err,
			 sizeof(err)) || resp.status >= 300)
		log_warn("cannot update a status", "object=\"%s\" status=%ld error=\"%s\"", LOG_Q(what), resp.status,
			 LOG_Q(err));
	kube_response_release(&resp);
}

/* ---- bind ----------------------------------------------------------------- */

uint32_t reserve_new_token(struct reserve *r)
{
	/* Odd multiplier: distinct counts give distinct tokens; the salt keeps replicas apart. */
	uint32_t t = (atomic_fetch_add(&r->tokens, 1) + 1) * 2654435761u ^ r->token_salt;
	return t ? t : 1;
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

struct gpu_node *reserve_node_in_ledger(struct reserve *r, const struct gpu_node *devices, const struct ledger *l)
{
	struct gpu_node *n = gpu_node_clone(devices);
	if (!n)
		return NULL;
	/* a deleted pod's entry waits for the reaper, but its GPUs are free */
	pthread_mutex_lock(&r->lock);
	for (int k = 0; k < l->n; k++)
		if (!strmap_get(&r->gone, l->e[k].a.uid))
			alloc_apply(n, &l->e[k].a);
	pthread_mutex_unlock(&r->lock);
	return n;
}

/* A bind that took a gang's place over failed: the entry becomes a place of the gang again. */
static int edit_unplace(void *ctx, struct ledger *l, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	const struct bind_ctx *b = ctx;
	int i = ledger_find(l, b->req->uid);
	if (i < 0 || strcmp(l->e[i].gang, b->req->claim->gang))
		return LEDGER_UNCHANGED;
	char id[17];
	ledger_gang_id(b->req->ns, b->req->claim->gang, id);
	snprintf(l->e[i].a.uid, sizeof(l->e[i].a.uid), LEDGER_PLACE_PREFIX "%s-r%.8s", id, b->req->uid);
	ledger_entry_set_pod(&l->e[i], b->req->ns, b->req->claim->gang);
	return LEDGER_WRITE;
}

/* The binding's annotations: the allocation, the UUIDs, one per visible-devices variable. */
static void add_annotations(struct buf *out, const struct gpu_node *n, const struct ledger_entry *e,
			    const char *node)
{
	struct buf uuids, cuda, rocr, ze;
	buf_init(&uuids, 8192);
	buf_init(&cuda, 8192);
	buf_init(&rocr, 8192);
	buf_init(&ze, 8192);
	char ids[256], alloc[512];
	alloc_ids(&e->a, ids, sizeof(ids));
	for (int k = 0; k < e->a.ndev; k++) {
		int i = gpu_node_find_device(n, alloc_id(&e->a, k));
		if (i < 0)
			continue;
		const struct gpu_device_info *in = &n->info[i];
		char idx[16];
		snprintf(idx, sizeof(idx), "%d", in->vendor_index);
		/* UUIDs when known: valid in CUDA/NVIDIA/ROCR lists and stable across renumbering. */
		const char *name = in->uuid[0] ? in->uuid : idx;
		buf_printf(&uuids, "%s%s", uuids.len ? "," : "", in->uuid);
		switch (n->dev[i].vendor) {
		case GPU_VENDOR_NVIDIA:
			buf_printf(&cuda, "%s%s", cuda.len ? "," : "", name);
			break;
		case GPU_VENDOR_AMD:
			buf_printf(&rocr, "%s%s", rocr.len ? "," : "", name);
			break;
		case GPU_VENDOR_INTEL:
			buf_printf(&ze, "%s%s", ze.len ? "," : "", idx);
			break;
		default:
			break;
		}
	}
	snprintf(alloc, sizeof(alloc), "%s:%s", node, ids);
	struct { const char *key; const char *value; } anns[] = {
		{ ANN_ALLOCATED, alloc }, { ANN_UUIDS, buf_cstr(&uuids) }, { ANN_CUDA, buf_cstr(&cuda) },
		{ ANN_NVIDIA, buf_cstr(&cuda) }, { ANN_ROCR, buf_cstr(&rocr) }, { ANN_ZE, buf_cstr(&ze) },
	};
	for (size_t i = 0; i < sizeof(anns) / sizeof(anns[0]); i++) {
		buf_adds(out, i ? "," : "");
		buf_add_json_str(out, anns[i].key);
		buf_addc(out, ':');
		buf_add_json_str(out, anns[i].value);
	}
	if (e->a.mode == CLAIM_SHARED)
		buf_printf(out, ",\"" ANN_SHARED_MEMORY "\":\"%u\",\"" ANN_SHARED_CORE "\":\"%u\"", e->a.mem_mib,
			   e->a.core / 10);
	buf_release(&uuids);
	buf_release(&cuda);
	buf_release(&rocr);
	buf_release(&ze);
}

/* What became of a binding whose POST failed. */
enum { BINDING_REFUSED = -1, BINDING_UNKNOWN = -2 };

/*
 * Where the API server has the pod now: 0 with its node ("" while unbound)
 * and its allocation annotation ("" when none), 1 when it is gone, -1 when
 * it cannot tell.
 */
static int pod_node_now(struct reserve *r, const struct bind_request *req, char *node, size_t size, char *allocated,
			size_t asize)
{
	char path[768], err[256];
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", req->ns, req->name);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = -1;
	if (!kube_request(r->o.client, "GET", path, NULL, NULL, 5, &resp, err, sizeof(err))) {
		if (resp.status == 404) {
			rc = 1;
		} else if (resp.status == 200) {
			cJSON *pod = cJSON_ParseWithLength(resp.body.data, resp.body.len);
			struct api_pod_ref ref;
			api_pod_ref(pod, &ref);
			const char *on = api_str(api_path(pod, "spec"), "nodeName");
			if (pod && req->uid[0] && strcmp(ref.uid, req->uid)) {
				rc = 1;                 /* another pod of that name */
			} else if (pod) {
				const char *ann = api_annotation(pod, ANN_ALLOCATED);
				snprintf(node, size, "%s", on ? on : "");
				snprintf(allocated, asize, "%s", ann ? ann : "");
				rc = 0;
			}
			jsonarena_delete(pod);  /* during /bind the tree is the request arena's */
		}
	}
	kube_response_release(&resp);
	return rc;
}

/*
 * POST pods/binding; 0 when the pod is (now, or already) on the node,
 * BINDING_REFUSED when it is not, BINDING_UNKNOWN when nobody can tell: no
 * answer came (a connection reset or a timeout after the request went out)
 * or a 5xx did, and the API server may have bound the pod all the same. Then
 * a read of the pod decides when it can. When the pod was on the node
 * already (an earlier try bound it, or this one's answer was lost), *had is
 * its allocation annotation as a read of it showed ("" when not read): an
 * earlier try may have bound it with other devices than e's.
 */
static int post_binding(struct reserve *r, const struct bind_request *req, const struct gpu_node *n,
			const struct ledger_entry *e, char *had, size_t hadsize, char *err, size_t errlen)
{
	had[0] = '\0';
	struct buf body;
	buf_init(&body, 1 << 16);
	buf_adds(&body, "{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{\"name\":");
	buf_add_json_str(&body, req->name);
	buf_adds(&body, ",\"namespace\":");
	buf_add_json_str(&body, req->ns);
	if (req->uid[0]) {
		buf_adds(&body, ",\"uid\":");
		buf_add_json_str(&body, req->uid);
	}
	if (e) {
		buf_adds(&body, ",\"annotations\":{");
		add_annotations(&body, n, e, req->node);
		buf_addc(&body, '}');
	}
	buf_adds(&body, "},\"target\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":");
	buf_add_json_str(&body, req->node);
	buf_adds(&body, "}}");
	char path[768], msg[512];
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/binding", req->ns, req->name);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = kube_request(r->o.client, "POST", path, buf_cstr(&body), NULL, 10, &resp, err, errlen);
	if (!rc && resp.status != 201 && resp.status != 200) {
		kube_status_message(&resp, msg, sizeof(msg));
		/* A retried bind finds the pod already on our node: that is success. */
		char want[300];
		snprintf(want, sizeof(want), "already assigned to node \"%s\"", req->node);
		if (resp.status == 409 && strstr(msg, want)) {
			char on[256] = "";
			rc = 0;
			if (e && (pod_node_now(r, req, on, sizeof(on), had, hadsize) || strcmp(on, req->node)))
				had[0] = '\0';
		} else {
			snprintf(err, errlen, "binding the pod: HTTP %ld: %s", resp.status, msg);
			rc = resp.status >= 500 ? BINDING_UNKNOWN : BINDING_REFUSED;
		}
	} else if (rc) {
		rc = BINDING_UNKNOWN;
	}
	if (rc == BINDING_UNKNOWN) {
		char on[256] = "";
		int known = pod_node_now(r, req, on, sizeof(on), had, hadsize);
		if (!known && !strcmp(on, req->node)) {
			log_info("the binding went through; its answer was lost", "pod=%s/%s node=%s error=\"%s\"", req->ns,
				 req->name, req->node, LOG_Q(err));
			rc = 0;
		} else if (known > 0 || (!known && on[0])) {
			rc = BINDING_REFUSED;   /* the pod is gone, or on another node */
		}
		if (rc)
			had[0] = '\0';
	}
	kube_response_release(&resp);
	buf_release(&body);
	return rc;
}

/*
 * The pod was on the node already, bound by an earlier try with devices had
 * (its annotation): when this try reserved others, its entry must not stand
 * for the pod. One ledger write makes the entry (this try's version only)
 * hold had's devices, so that neither set looks free meanwhile; ids becomes
 * what the pod holds.
 */
static void adopt_bound(struct reserve *r, const struct bind_request *req, struct bind_ctx *b, const char *had,
			char *ids, size_t idsize)
{
	struct resv_id mine = resv_id_of(&b->entry.a);
	struct adopt_ctx ac = { .r = r, .uid = req->uid, .only_id = &mine, .token = b->token, .want = b->entry.a,
				.devices = b->node };
	char err[256] = "";
	if (reserve_parse_allocated(had, req->node, &ac.want)) {
		log_error("a bound pod's allocation annotation names no devices of its node; its reservation stays as reserved",
			  "pod=%s/%s node=%s allocated=\"%s\" reserved=%s", req->ns, req->name, req->node, LOG_Q(had), ids);
		return;
	}
	char want[256];
	alloc_ids(&ac.want, want, sizeof(want));
	if (!strcmp(want, ids))
		return;
	int rc = reserve_ledger_update(r, req->node, reserve_edit_adopt, &ac, err, sizeof(err));
	if (rc == 0) {
		log_warn("the pod was bound already with other devices; its reservation now holds those",
			 "pod=%s/%s node=%s gpus=%s reserved=%s", req->ns, req->name, req->node, want, ids);
		cache_lock(r->o.cache);
		cache_remove_alloc(r->o.cache, req->uid, req->node);
		cache_add_alloc(r->o.cache, req->node, &ac.now);
		cache_unlock(r->o.cache);
		snprintf(ids, idsize, "%s", want);
	} else if (ac.clash) {
		log_error("a bound pod's GPUs are reserved by another pod; both stay held, check the ledger",
			  "pod=%s/%s node=%s gpus=%s reserved=%s", req->ns, req->name, req->node, want, ids);
	} else {
		log_warn("cannot make a bound pod's reservation hold its devices now; the reaper will",
			 "pod=%s/%s node=%s gpus=%s reserved=%s error=\"%s\"", req->ns, req->name, req->node, want, ids,
			 LOG_Q(err));
	}
}

int reserve_bind(void *ctx, const struct bind_request *req, char *err, size_t errlen)
{
	struct reserve *r = ctx;
	if (!claim_wants_gpu(req->claim))
	{
		char had[8];
		return post_binding(r, req, NULL, NULL, had, sizeof(had), err, errlen) ? BIND_ERROR : BIND_OK;
	}

	char pod[320];
	snprintf(pod, sizeof(pod), "%s/%s", req->ns, req->name);
	/* A second bind of a pod an earlier one bound (kube-scheduler gave up
	 * waiting on the first and placed the pod again): its binding would be
	 * refused, since a pod's nodeName never changes once set; write nothing. */
	char bound[256];
	pod_seen(r, req->uid, bound, sizeof(bound));
	if (bound[0] && strcmp(bound, req->node)) {
		snprintf(err, errlen, "pod %s is already assigned to node \"%s\" (seen by the pod watch; nothing written)", pod,
			 bound);
		return BIND_ERROR;
	}

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
	if (!b.node) {
		snprintf(err, errlen, "node %s has no GpuNodeStatus", req->node);
		reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Failed", req->node, "", pod, err);
		return BIND_NO_FIT;
	}
	int rc = reserve_ledger_update(r, req->node, reserve_edit_reserve, &b, err, errlen);
	if (rc < 0) {
		gpu_node_free(b.node);
		reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Failed", req->node, "", pod, err);
		return -rc;
	}
	/* Seen by this replica's filters at once; the ledger watch confirms it. */
	cache_lock(r->o.cache);
	cache_add_alloc(r->o.cache, req->node, &b.entry.a);
	cache_unlock(r->o.cache);

	char ids[256];
	alloc_ids(&b.entry.a, ids, sizeof(ids));
	reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Reserved", req->node, ids, pod, "binding the pod");
	int posted = 0;
	char had[512] = "";
	if ((!pod_seen(r, req->uid, NULL, 0) && reserve_create_reservation(r, &b.entry, req->node, err, errlen)) ||
	    (posted = post_binding(r, req, b.node, &b.entry, had, sizeof(had), err, errlen))) {
		char why[512];
		snprintf(why, sizeof(why), "%s", err);
		if (posted == BINDING_UNKNOWN) {
			/* The pod may be bound here with these devices: released now, they could go to
			 * another pod as well. They stay until the pod is seen bound (then they are its),
			 * bound elsewhere, or not bound within the bind timeout (the reaper). */
			log_warn("the binding's outcome is unknown; its reservation stays for the reaper", "pod=%s node=%s error=\"%s\"",
				 pod, req->node, LOG_Q(why));
			snprintf(err, errlen, "%s (whether the pod was bound is unknown; its reservation stays until the bind timeout)",
				 why);
			gpu_node_free(b.node);
			return BIND_ERROR;
		}
		if (b.existed) {
			/* Another try of this bind made the reservation, and may have bound the pod
			 * meanwhile (kube-scheduler retries a bind that is still in flight here):
			 * released now, its GPUs could go to a second pod. The reaper decides. */
			log_warn("a retried bind failed; the reservation it found stays for the reaper", "pod=%s node=%s error=\"%s\"",
				 pod, req->node, LOG_Q(why));
			gpu_node_free(b.node);
			return BIND_ERROR;
		}
		const char *uid = req->uid;
		char rel_err[256];
		if (b.took_place) {
			/* Its gang's place goes back to the gang, not to everyone. */
			if (reserve_ledger_update(r, req->node, edit_unplace, &b, rel_err, sizeof(rel_err)) < 0)
				log_warn("cannot give a failed bind's place back to its gang now; the reaper will release it",
					 "pod=%s/%s gang=%s error=\"%s\"", req->ns, req->name, req->claim->gang, LOG_Q(rel_err));
			cache_lock(r->o.cache);
			cache_remove_alloc(r->o.cache, req->uid, req->node);
			cache_unlock(r->o.cache);
			reserve_delete_reservation(r, req->ns, req->uid, req->node);
		} else if (reserve_release(r, req->node, &uid, &(struct resv_id){ b.entry.a.since, b.entry.a.token }, 1, rel_err,
					   sizeof(rel_err))) {
			log_warn("cannot release a failed bind's reservation now; the reaper will", "pod=%s/%s error=\"%s\"",
				 req->ns, req->name, LOG_Q(rel_err));
		} else {
			metrics_inc(M_RELEASED, REL_BIND_FAILED);
		}
		reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Failed", req->node, "", pod, why);
		snprintf(err, errlen, "%s", why);
		gpu_node_free(b.node);
		return BIND_ERROR;
	}
	if (had[0])
		adopt_bound(r, req, &b, had, ids, sizeof(ids));
	if (moved) {
		const char *uid = req->uid;
		char rel_err[256];
		struct resv_id was = resv_id_of(&old);
		if (reserve_release(r, where, &uid, &was, 1, rel_err, sizeof(rel_err)))
			log_warn("cannot release a moved pod's older reservation now; the reaper will", "pod=%s/%s node=%s error=\"%s\"",
				 req->ns, req->name, where, LOG_Q(rel_err));
		else {
			metrics_inc(M_RELEASED, REL_BIND_FAILED);
			log_info("released a reservation", "pod=%s/%s node=%s reason=\"bound to %s instead\"", req->ns,
				 req->name, where, req->node);
		}
	}
	reserve_claim_status(r, req->ns, req->claim->gpuclaim, "Bound", req->node, ids, pod, "");
	if (b.took_place)
		reserve_gang_place_taken(r, req->ns, req->claim);
	log_info("reserved and bound", "pod=%s node=%s gpus=%s retried=%s gang=%s", pod, req->node, ids,
		 b.existed ? "yes" : "no", b.took_place ? req->claim->gang : "-");
	gpu_node_free(b.node);
	return BIND_OK;
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
