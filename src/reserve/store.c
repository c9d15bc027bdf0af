/*
 * The reservation storage in the API server: ledgers, reservation Leases
 * and gang locks as coordination.k8s.io Leases (docs/ledger.md).
 */
#include "store.h"
#include "api.h"
#include "clock.h"
#include "jsonarena.h"
#include "log.h"
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GANG_LOCK_LABEL "gpu.scheduling/gang-lock"
#define GANG_ANN "gpu.scheduling/gang"
#define LEASES "/apis/coordination.k8s.io/v1/namespaces/%s/leases"

/* ---- ledgers ---- */

static void ledger_path(const struct store *s, const char *node, char *out, size_t size)
{
	char name[LEDGER_NAME_MAX + 20];
	ledger_lease_name(node, name, sizeof(name));
	snprintf(out, size, LEASES "/%s", s->ns, name);
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

int store_ledger_read(struct store *s, const char *node, struct ledger *out, char *err, size_t errlen)
{
	char path[1200], msg[256];
	ledger_path(s, node, path, sizeof(path));
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = STORE_ERROR;
	if (kube_request(s->client, "GET", path, NULL, NULL, 10, &resp, err, errlen)) {
		/* err says why */
	} else if (resp.status == 404) {
		ledger_init(out, node);
		rc = STORE_OK;
	} else if (resp.status != 200) {
		snprintf(err, errlen, "reading the ledger of %s: HTTP %ld: %s", node, resp.status,
			 kube_status_message(&resp, msg, sizeof(msg)));
	} else if (!ledger_of_response(&resp, node, out, err, errlen)) {
		rc = STORE_OK;
	}
	kube_response_release(&resp);
	return rc;
}

int store_ledger_write(struct store *s, const struct ledger *l, struct ledger *now, char *err, size_t errlen)
{
	char path[1200], msg[256], why[256];
	bool create = !l->rv[0];
	if (create)
		snprintf(path, sizeof(path), LEASES, s->ns);
	else
		ledger_path(s, l->node, path, sizeof(path));
	struct buf body;
	buf_init(&body, (size_t)2 << 20);
	ledger_encode(l, s->ns, s->identity, &body);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = STORE_ERROR;
	if (kube_request(s->client, create ? "POST" : "PUT", path, buf_cstr(&body), NULL, 10, &resp, err, errlen)) {
		/* err says why */
	} else if (resp.status == 200 || resp.status == 201) {
		rc = STORE_OK;
		if (ledger_of_response(&resp, l->node, now, why, sizeof(why)))
			ledger_init(now, l->node);   /* written; its version unknown */
	} else if (resp.status == 409 || (resp.status == 404 && !create)) {
		rc = STORE_CONFLICT;    /* someone else wrote first (or created it, or deleted it) */
	} else {
		snprintf(err, errlen, "writing the ledger of %s: HTTP %ld: %s", l->node, resp.status,
			 kube_status_message(&resp, msg, sizeof(msg)));
	}
	kube_response_release(&resp);
	buf_release(&body);
	return rc;
}

/* ---- reservation Leases ---- */

/* Named after the pod and the node: a racing bind of the pod elsewhere has its own. */
static void resv_path(const char *ns, const char *uid, const char *node, char *out, size_t size)
{
	char name[128];
	ledger_reservation_name(uid, node, name, sizeof(name));
	snprintf(out, size, LEASES "/%s", ns, name);
}

/* The renewal of a reservation Lease that exists: STORE_OK, STORE_NONE (deleted meanwhile), STORE_ERROR. */
static int resv_renew(struct store *s, const struct ledger_entry *e, const char *node, struct kube_response *resp,
		      char *err, size_t errlen)
{
	char path[512], now[40], renew[96];
	resv_path(e->ns, e->a.uid, node, path, sizeof(path));
	ledger_microtime(now, sizeof(now));
	snprintf(renew, sizeof(renew), "{\"spec\":{\"renewTime\":\"%s\"}}", now);
	if (kube_request(s->client, "PATCH", path, renew, "application/merge-patch+json", 10, resp, err, errlen))
		return STORE_ERROR;
	return resp->status == 404 ? STORE_NONE : STORE_OK;
}

/*
 * POST, and on a conflict the renewal of the one there (an earlier try of
 * this very bind made it): renewing changes its resourceVersion, so that a
 * delete decided on the version before fails. One deleted before the
 * renewal (404) is made again.
 */
int store_resv_put(struct store *s, const struct ledger_entry *e, const char *node, char *err, size_t errlen)
{
	struct buf body;
	buf_init(&body, 1 << 16);
	ledger_encode_reservation(e, node, &body);
	char path[512], msg[256];
	snprintf(path, sizeof(path), LEASES, e->ns);
	int rc = STORE_ERROR;
	for (int attempt = 0; attempt < 3; attempt++) {
		struct kube_response resp;
		kube_response_init(&resp);
		rc = kube_request(s->client, "POST", path, buf_cstr(&body), NULL, 10, &resp, err, errlen) ? STORE_ERROR
													 : STORE_OK;
		if (rc == STORE_OK && resp.status == 409) {
			kube_response_release(&resp);
			kube_response_init(&resp);
			rc = resv_renew(s, e, node, &resp, err, errlen);
			if (rc == STORE_NONE) {
				kube_response_release(&resp);
				continue;       /* deleted meanwhile: make it again */
			}
		}
		if (rc == STORE_OK && resp.status != 201 && resp.status != 200) {
			snprintf(err, errlen, "creating the reservation Lease: HTTP %ld: %s", resp.status,
				 kube_status_message(&resp, msg, sizeof(msg)));
			rc = STORE_ERROR;
		}
		kube_response_release(&resp);
		break;
	}
	buf_release(&body);
	return rc;
}

int store_resv_read(struct store *s, const char *ns, const char *uid, const char *node, char *lease_uid,
		    size_t usize, char *version, size_t vsize, char *err, size_t errlen)
{
	char path[512];
	resv_path(ns, uid, node, path, sizeof(path));
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = STORE_ERROR;
	if (kube_request(s->client, "GET", path, NULL, NULL, 10, &resp, err, errlen)) {
		/* err says why */
	} else if (resp.status == 404) {
		rc = STORE_NONE;
	} else if (resp.status != 200) {
		snprintf(err, errlen, "reading a reservation Lease: HTTP %ld", resp.status);
	} else {
		cJSON *lease = cJSON_ParseWithLength(resp.body.data, resp.body.len);
		const cJSON *md = api_path(lease, "metadata");
		const char *u = api_str(md, "uid"), *v = api_str(md, "resourceVersion");
		snprintf(lease_uid, usize, "%s", u ? u : "");
		snprintf(version, vsize, "%s", v ? v : "");
		jsonarena_delete(lease);   /* during /bind the tree is the request arena's */
		rc = STORE_OK;
	}
	kube_response_release(&resp);
	return rc;
}

int store_resv_delete(struct store *s, const char *ns, const char *uid, const char *node, const char *lease_uid,
		      const char *version, char *err, size_t errlen)
{
	char path[512], body[256];
	resv_path(ns, uid, node, path, sizeof(path));
	snprintf(body, sizeof(body),
		 "{\"apiVersion\":\"v1\",\"kind\":\"DeleteOptions\",\"preconditions\":{\"uid\":\"%s\",\"resourceVersion\":\"%s\"}}",
		 lease_uid, version);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = STORE_ERROR;
	if (kube_request(s->client, "DELETE", path, body, NULL, 10, &resp, err, errlen))
		rc = STORE_ERROR;
	else if (resp.status < 300)
		rc = STORE_OK;
	else if (resp.status == 404)
		rc = STORE_NONE;
	else if (resp.status == 409)
		rc = STORE_CONFLICT;
	else
		snprintf(err, errlen, "deleting a reservation Lease: HTTP %ld", resp.status);
	kube_response_release(&resp);
	return rc;
}

/* ---- gang locks ---- */

static void lock_path(const struct store *s, const char *id, char *out, size_t size)
{
	snprintf(out, size, LEASES "%s%s", s->ns, id ? "/gpu-gang." : "", id ? id : "");
}

/* A lock Lease's end (renewTime + leaseDurationSeconds), unix seconds; 0 when unreadable. */
static int64_t lock_end(const cJSON *lease, int duration_s)
{
	const char *renew = api_str(api_path(lease, "spec"), "renewTime");
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	if (!renew || !strptime(renew, "%Y-%m-%dT%H:%M:%S", &tm) || !duration_s)
		return 0;
	return (int64_t)timegm(&tm) + duration_s;
}

/* The lock an object is (taken: out owns it); false when it is not one (obj then freed). */
static bool lock_of(cJSON *obj, struct store_lock *out)
{
	memset(out, 0, sizeof(*out));
	const cJSON *md = api_path(obj, "metadata"), *spec = api_path(obj, "spec");
	const char *name = api_str(md, "name"), *rv = api_str(md, "resourceVersion");
	char err[256];
	if (!name || strncmp(name, "gpu-gang.", 9) || !rv) {
		cJSON_Delete(obj);
		return false;
	}
	if (!ledger_version_known(obj, err, sizeof(err))) {
		/* never taken back or deleted by this replica: it expires, and its places with it */
		log_warn("a gang's lock Lease of a newer format; left alone", "lease=%s error=\"%s\"", name, LOG_Q(err));
		cJSON_Delete(obj);
		return false;
	}
	const char *h = api_str(spec, "holderIdentity"), *g = api_annotation(obj, GANG_ANN);
	snprintf(out->id, sizeof(out->id), "%s", name + 9);
	snprintf(out->rv, sizeof(out->rv), "%s", rv);
	snprintf(out->holder, sizeof(out->holder), "%s", h ? h : "");
	snprintf(out->gang, sizeof(out->gang), "%s", g ? g : "");
	double secs = 0;
	api_whole(cJSON_GetObjectItemCaseSensitive(spec, "leaseDurationSeconds"), 1, 1e6, &secs);
	out->duration_s = (int)secs;
	out->end = lock_end(obj, out->duration_s);
	out->planned = !ledger_intent_decode(api_annotation(obj, GANG_PLAN_ANN), &out->in, err, sizeof(err));
	out->own = obj;
	return true;
}

void store_lock_release(struct store_lock *l)
{
	ledger_intent_release(&l->in);
	cJSON_Delete(l->own);
	l->own = NULL;
}

/* The lock Lease to create: held by this replica, with the plan it is about to write. */
static void lock_body(const struct store *s, const char *ns, const char *gang, const char *id, int timeout,
		      const struct gang_intent *in, struct buf *out)
{
	char now[40], key[256];
	ledger_microtime(now, sizeof(now));
	struct buf intent;
	buf_init(&intent, 1 << 20);
	ledger_intent_encode(in, &intent);
	buf_printf(out, "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":"
			"\"gpu-gang.%s\",\"labels\":{\"" GANG_LOCK_LABEL "\":\"true\"},\"annotations\":{\"" LEDGER_ANN_VERSION
			"\":\"%d\",\"" GANG_ANN "\":", id, LEDGER_VERSION);
	snprintf(key, sizeof(key), "%s/%s", ns, gang);
	buf_add_json_str(out, key);
	buf_adds(out, ",\"" GANG_PLAN_ANN "\":");
	buf_add_json_str(out, buf_cstr(&intent));
	buf_adds(out, "}},\"spec\":{\"holderIdentity\":");
	buf_add_json_str(out, s->identity);
	buf_printf(out, ",\"leaseDurationSeconds\":%d,\"acquireTime\":\"%s\",\"renewTime\":\"%s\"}}", timeout, now, now);
	buf_release(&intent);
}

int store_lock_create(struct store *s, const char *ns, const char *gang, const char *id, int timeout,
		      const struct gang_intent *in, struct store_lock *out, char *err, size_t errlen)
{
	char path[512], msg[256];
	memset(out, 0, sizeof(*out));
	struct buf body;
	buf_init(&body, 1 << 20);
	lock_body(s, ns, gang, id, timeout, in, &body);
	lock_path(s, NULL, path, sizeof(path));
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = STORE_ERROR;
	if (kube_request(s->client, "POST", path, buf_cstr(&body), NULL, 10, &resp, err, errlen)) {
		/* err says why */
	} else if (resp.status == 201 || resp.status == 200) {
		if (lock_of(cJSON_ParseWithLength(resp.body.data, resp.body.len), out))
			rc = STORE_OK;
		else
			snprintf(err, errlen, "the gang's lock Lease came back unreadable");
	} else if (resp.status == 409) {
		rc = STORE_CONFLICT;
	} else {
		snprintf(err, errlen, "creating the gang's lock Lease: HTTP %ld: %s", resp.status,
			 kube_status_message(&resp, msg, sizeof(msg)));
	}
	kube_response_release(&resp);
	buf_release(&body);
	return rc;
}

int store_lock_read(struct store *s, const char *id, struct store_lock *out, char *err, size_t errlen)
{
	char path[512];
	memset(out, 0, sizeof(*out));
	lock_path(s, id, path, sizeof(path));
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = STORE_ERROR;
	if (kube_request(s->client, "GET", path, NULL, NULL, 10, &resp, err, errlen)) {
		/* err says why */
	} else if (resp.status == 404) {
		rc = STORE_NONE;
	} else if (resp.status != 200) {
		snprintf(err, errlen, "reading the gang's lock Lease: HTTP %ld", resp.status);
	} else if (lock_of(cJSON_ParseWithLength(resp.body.data, resp.body.len), out)) {
		rc = STORE_OK;
	} else {
		snprintf(err, errlen, "the gang's lock Lease is unreadable");
	}
	kube_response_release(&resp);
	return rc;
}

int store_lock_set_state(struct store *s, struct store_lock *l, enum gang_plan_state st, char *err, size_t errlen)
{
	cJSON *ann = cJSON_GetObjectItemCaseSensitive(api_path(l->own, "metadata"), "annotations");
	struct gang_intent in;
	if (!l->own || ledger_intent_decode(api_str(ann, GANG_PLAN_ANN), &in, err, errlen))
		return STORE_ERROR;
	in.state = st;
	struct buf b;
	buf_init(&b, 1 << 20);
	ledger_intent_encode(&in, &b);
	ledger_intent_release(&in);
	cJSON_ReplaceItemInObjectCaseSensitive(ann, GANG_PLAN_ANN, cJSON_CreateString(buf_cstr(&b)));
	buf_release(&b);
	char path[512];
	lock_path(s, l->id, path, sizeof(path));
	char *body = cJSON_PrintUnformatted(l->own);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = STORE_ERROR;
	struct store_lock now;
	if (!body) {
		snprintf(err, errlen, "out of memory");
	} else if (kube_request(s->client, "PUT", path, body, NULL, 10, &resp, err, errlen)) {
		/* err says why */
	} else if (resp.status == 200) {
		if (lock_of(cJSON_ParseWithLength(resp.body.data, resp.body.len), &now)) {
			store_lock_release(l);
			*l = now;
		}
		l->in.state = st;
		rc = STORE_OK;
	} else if (resp.status == 404 || resp.status == 409) {
		rc = STORE_CONFLICT;
	} else {
		snprintf(err, errlen, "writing the gang's lock Lease: HTTP %ld", resp.status);
	}
	cJSON_free(body);
	kube_response_release(&resp);
	return rc;
}

void store_lock_delete(struct store *s, const char *id, const char *rv)
{
	char path[512], body[256], err[256];
	lock_path(s, id, path, sizeof(path));
	snprintf(body, sizeof(body), "{\"preconditions\":{\"resourceVersion\":\"%s\"}}", rv);
	struct kube_response resp;
	kube_response_init(&resp);
	if (kube_request(s->client, "DELETE", path, rv[0] ? body : NULL, NULL, 10, &resp, err, sizeof(err)) ||
	    (resp.status >= 300 && resp.status != 404 && resp.status != 409))
		log_warn("cannot delete a gang's lock Lease; it expires on its own", "lease=gpu-gang.%s status=%ld", id,
			 resp.status);
	kube_response_release(&resp);
}

int store_lock_list(struct store *s, struct store_lock **out, int *n, char *err, size_t errlen)
{
	char path[512];
	snprintf(path, sizeof(path), LEASES "?labelSelector=" GANG_LOCK_LABEL "%%3Dtrue", s->ns);
	*out = NULL;
	*n = 0;
	struct kube_response resp;
	kube_response_init(&resp);
	if (kube_request(s->client, "GET", path, NULL, NULL, 10, &resp, err, errlen) || resp.status != 200) {
		if (resp.status && resp.status != 200)
			snprintf(err, errlen, "listing the gangs' lock Leases: HTTP %ld", resp.status);
		kube_response_release(&resp);
		return STORE_ERROR;
	}
	cJSON *list = cJSON_ParseWithLength(resp.body.data, resp.body.len);
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items"), *it;
	*out = calloc((size_t)cJSON_GetArraySize(items) + 1, sizeof(**out));
	cJSON_ArrayForEach(it, items) {
		/* A copy each: a write back swaps it for its new version. */
		if (*out && lock_of(cJSON_Duplicate(it, true), &(*out)[*n]))
			(*n)++;
	}
	cJSON_Delete(list);
	kube_response_release(&resp);
	return STORE_OK;
}

void store_lock_free_all(struct store_lock *locks, int n)
{
	for (int i = 0; i < n; i++)
		store_lock_release(&locks[i]);
	free(locks);
}

/* ---- watches ---- */

/* Either watch's hooks: ctx is a store_ledger_events or store_resv_events, whose first member they are. */
static void ev_lock(void *ctx)
{
	const struct store_watch_hooks *h = ctx;
	h->lock(h->ctx);
}

static void ev_unlock(void *ctx)
{
	const struct store_watch_hooks *h = ctx;
	h->unlock(h->ctx);
}

static void ev_begin(void *ctx)
{
	const struct store_watch_hooks *h = ctx;
	h->begin(h->ctx);
}

static void ev_end(void *ctx)
{
	const struct store_watch_hooks *h = ctx;
	h->end(h->ctx);
}

static void ev_ledger_apply(void *ctx, bool deleted, const cJSON *obj)
{
	const struct store_ledger_events *ev = ctx;
	const char *node = api_annotation(obj, LEDGER_ANN_NODE);
	if (!node)
		return;
	if (deleted) {
		ev->deleted(ev->hooks.ctx, node, api_str(api_path(obj, "metadata"), "resourceVersion"));
		return;
	}
	struct ledger l;
	char err[256];
	if (ledger_decode(obj, &l, err, sizeof(err)))
		ev->unreadable(ev->hooks.ctx, node, err);
	else
		ev->put(ev->hooks.ctx, node, &l);
}

void store_ledger_sink(const struct store_ledger_events *ev, struct reflector_sink *out)
{
	*out = (struct reflector_sink){ ev_lock, ev_unlock, ev_begin, ev_ledger_apply, ev_end, (void *)ev };
}

/* The owning pod's uid (and name, when pod is not NULL). */
static const char *owner_uid(const cJSON *obj, const char **pod)
{
	const cJSON *refs = api_path(obj, "metadata.ownerReferences");
	const cJSON *ref;
	cJSON_ArrayForEach(ref, refs) {
		const char *kind = api_str(ref, "kind");
		if (kind && !strcmp(kind, "Pod")) {
			if (pod)
				*pod = api_str(ref, "name");
			return api_str(ref, "uid");
		}
	}
	return NULL;
}

static void ev_resv_apply(void *ctx, bool deleted, const cJSON *obj)
{
	const struct store_resv_events *ev = ctx;
	const char *pod = NULL, *uid = owner_uid(obj, &pod);
	const cJSON *md = api_path(obj, "metadata");
	const char *ns = api_str(md, "namespace"), *name = api_str(md, "name");
	if (deleted) {
		ev->deleted(ev->hooks.ctx, ns ? ns : "", name ? name : "", uid);
		return;
	}
	const char *node = api_annotation(obj, LEDGER_ANN_NODE);
	char err[256];
	if (!ledger_version_known(obj, err, sizeof(err))) {
		/* Not taken in: nothing here ever deletes it (its pod's garbage collection does). */
		log_warn("a reservation Lease of a newer format; left alone", "lease=%s/%s error=\"%s\"", ns ? ns : "",
			 name ? name : "", LOG_Q(err));
		return;
	}
	if (uid && ns && name && node)
		ev->put(ev->hooks.ctx, ns, name, uid, pod ? pod : "", node);
}

void store_resv_sink(const struct store_resv_events *ev, struct reflector_sink *out)
{
	*out = (struct reflector_sink){ ev_lock, ev_unlock, ev_begin, ev_resv_apply, ev_end, (void *)ev };
}

int store_watch_start(struct store *s, struct cluster *cl, int idle_timeout_s, struct reflector *out[2], char *err,
		      size_t errlen)
{
	char ledgers[256];
	snprintf(ledgers, sizeof(ledgers), LEASES, s->ns);
	struct reflector_opts o[2] = {
		{ .name = "ledgers", .resource = RES_LEASES, .path = ledgers, .label_selector = LEDGER_LABEL "=true" },
		{ .name = "reservations", .resource = RES_LEASES, .path = "/apis/coordination.k8s.io/v1/leases",
		  .label_selector = RESERVATION_LABEL "=true" },
	};
	store_ledger_sink(&s->ledger_ev, &o[0].sink);
	store_resv_sink(&s->resv_ev, &o[1].sink);
	for (int i = 0; i < 2; i++) {
		o[i].idle_timeout_s = idle_timeout_s;
		out[i] = reflector_start(s->client, &o[i], err, errlen);
		if (!out[i] || cluster_add(cl, out[i]))
			return -1;
	}
	return 0;
}
