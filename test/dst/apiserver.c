/*
 * The API server model: Leases and Pods with a resourceVersion each from one
 * counter, 409s on a stale resourceVersion or an existing name, the binding
 * subresource (its uid and resourceVersion preconditions checked before
 * whether the pod is bound, as the API server does), merge patches, DELETE preconditions, label-selected watches
 * (an object that stops matching is DELETED for the watch), and the
 * owner-reference garbage collector for reservation Leases.
 */
#include "dst.h"
#include "api.h"
#include "ledger.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEASES "/apis/coordination.k8s.io/v1/namespaces/"
#define PODS "/api/v1/namespaces/"
#define GROUPS "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/"
#define MAX_WATCHERS 8

enum kind { K_LEASE, K_POD, K_GROUP };

struct obj {
	enum kind kind;
	char ns[64], name[256];
	cJSON *json;
};

struct apiserver {
	struct obj *o;
	int n, cap;
	uint64_t rv, uids;
	char ledger_ns[64];
	int nwatchers;
	struct watch w[MAX_WATCHERS][W_KINDS];
	struct watch nw[DST_NODES][NW_KINDS];   /* spec.nodeName=<node>: kubelet's and the agent's */
	int64_t now_ms;
	struct apis_stats st;
};

struct apiserver *apis_new(const char *ledger_ns, int nwatchers)
{
	struct apiserver *a = calloc(1, sizeof(*a));
	snprintf(a->ledger_ns, sizeof(a->ledger_ns), "%s", ledger_ns);
	a->nwatchers = nwatchers < MAX_WATCHERS ? nwatchers : MAX_WATCHERS;
	a->rv = 1000;
	return a;
}

void apis_watch_pop(struct watch *w, int n)
{
	for (int i = 0; i < n && i < w->n; i++)
		cJSON_Delete(w->ev[i].obj);
	if (n > w->n)
		n = w->n;
	if (n <= 0)
		return;
	memmove(w->ev, w->ev + n, (size_t)(w->n - n) * sizeof(*w->ev));
	w->n -= n;
}

void apis_free(struct apiserver *a)
{
	if (!a)
		return;
	for (int i = 0; i < a->n; i++)
		cJSON_Delete(a->o[i].json);
	free(a->o);
	for (int i = 0; i < MAX_WATCHERS; i++)
		for (int k = 0; k < W_KINDS; k++) {
			apis_watch_pop(&a->w[i][k], a->w[i][k].n);
			free(a->w[i][k].ev);
		}
	for (int i = 0; i < DST_NODES; i++)
		for (int k = 0; k < NW_KINDS; k++) {
			apis_watch_pop(&a->nw[i][k], a->nw[i][k].n);
			free(a->nw[i][k].ev);
		}
	free(a);
}

int64_t apis_now_ms(struct apiserver *a)
{
	return a->now_ms;
}

void apis_set_now_ms(struct apiserver *a, int64_t ms)
{
	a->now_ms = ms;
}

struct watch *apis_watch(struct apiserver *a, int watcher, enum watch_kind k)
{
	return &a->w[watcher][k];
}

struct watch *apis_node_watch(struct apiserver *a, int node, enum node_watch_kind k)
{
	return &a->nw[node][k];
}

void apis_stats(struct apiserver *a, struct apis_stats *out)
{
	*out = a->st;
}

/* ---- objects ---- */

static const char *meta_str(const cJSON *o, const char *key)
{
	return api_str(api_path(o, "metadata"), key);
}

static const char *label(const cJSON *o, const char *key)
{
	return api_str(api_path(o, "metadata.labels"), key);
}

/* Which watch kind an object matches (-1: none). */
static int matches(const struct apiserver *a, const struct obj *x, const cJSON *json)
{
	if (!json)
		return -1;
	const char *v;
	if (x->kind == K_POD)
		return (v = label(json, LABEL_MANAGED)) && !strcmp(v, "true") ? W_PODS : -1;
	if ((v = label(json, LEDGER_LABEL)) && !strcmp(v, "true") && !strcmp(x->ns, a->ledger_ns))
		return W_LEDGERS;
	if ((v = label(json, RESERVATION_LABEL)) && !strcmp(v, "true"))
		return W_RESERVATIONS;
	return -1;
}

/* The index of the node a pod is bound to; -1 when unbound (or none). */
static int pod_node(const cJSON *pod)
{
	const char *n = pod ? api_str(api_path(pod, "spec"), "nodeName") : NULL;
	return n && n[0] == 'n' && n[1] >= '0' && n[1] < '0' + DST_NODES && !n[2] ? n[1] - '0' : -1;
}

static void push_event(struct watch *w, bool deleted, const cJSON *obj, int64_t now)
{
	if (!w->open)
		return;
	if (w->n == w->cap) {
		w->cap = w->cap ? w->cap * 2 : 16;
		w->ev = realloc(w->ev, (size_t)w->cap * sizeof(*w->ev));
	}
	w->ev[w->n++] = (struct watch_event){ deleted, cJSON_Duplicate(obj, true), now };
}

/* Tells every open watch about a change of x from before to after (NULL: deleted). */
static void notify(struct apiserver *a, const struct obj *x, const cJSON *before, const cJSON *after)
{
	int was = matches(a, x, before), is = matches(a, x, after);
	for (int i = 0; i < a->nwatchers; i++) {
		if (is >= 0)
			push_event(&a->w[i][is], false, after, a->now_ms);
		if (was >= 0 && was != is)   /* deleted, or no longer selected: DELETED */
			push_event(&a->w[i][was], true, after ? after : before, a->now_ms);
	}
	/* the nodes' field-selected pod watches (a pod never moves to another node) */
	int nwas = x->kind == K_POD ? pod_node(before) : -1, nis = x->kind == K_POD ? pod_node(after) : -1;
	for (int k = 0; k < NW_KINDS; k++) {
		if (nis >= 0)
			push_event(&a->nw[nis][k], false, after, a->now_ms);
		else if (nwas >= 0)
			push_event(&a->nw[nwas][k], true, before, a->now_ms);
	}
}

static struct obj *find(struct apiserver *a, enum kind k, const char *ns, const char *name)
{
	for (int i = 0; i < a->n; i++)
		if (a->o[i].kind == k && !strcmp(a->o[i].ns, ns) && !strcmp(a->o[i].name, name))
			return &a->o[i];
	return NULL;
}

static void set_str(cJSON *parent, const char *key, const char *v)
{
	cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
	cJSON_AddStringToObject(parent, key, v);
}

static cJSON *obj_child(cJSON *o, const char *key)
{
	cJSON *c = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!cJSON_IsObject(c)) {
		cJSON_DeleteItemFromObjectCaseSensitive(o, key);
		c = cJSON_AddObjectToObject(o, key);
	}
	return c;
}

/* Gives json a new resourceVersion; stores it as x's (x takes json) and tells the watches. */
static void commit(struct apiserver *a, struct obj *x, cJSON *json)
{
	char rv[32];
	snprintf(rv, sizeof(rv), "%llu", (unsigned long long)++a->rv);
	set_str(obj_child(json, "metadata"), "resourceVersion", rv);
	notify(a, x, x->json, json);
	cJSON_Delete(x->json);
	x->json = json;
}

static struct obj *add(struct apiserver *a, enum kind k, const char *ns, const char *name, cJSON *json)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 64;
		a->o = realloc(a->o, (size_t)a->cap * sizeof(*a->o));
	}
	struct obj *x = &a->o[a->n++];
	memset(x, 0, sizeof(*x));
	x->kind = k;
	snprintf(x->ns, sizeof(x->ns), "%s", ns);
	snprintf(x->name, sizeof(x->name), "%s", name);
	cJSON *md = obj_child(json, "metadata");
	set_str(md, "name", x->name);    /* (name may point into json) */
	set_str(md, "namespace", x->ns);
	char uid[48];
	snprintf(uid, sizeof(uid), "%s-%llu", k == K_POD ? "pod" : "lease", (unsigned long long)++a->uids);
	set_str(md, "uid", uid);
	commit(a, x, json);
	return x;
}

static void drop(struct apiserver *a, struct obj *x)
{
	notify(a, x, x->json, NULL);
	cJSON_Delete(x->json);
	*x = a->o[--a->n];
}

/* ---- answers ---- */

static long answer(struct kube_response *r, long status, const cJSON *obj)
{
	buf_clear(&r->body);
	char *s = cJSON_PrintUnformatted(obj);
	buf_adds(&r->body, s);
	free(s);
	r->status = status;
	return status;
}

static long status(struct apiserver *a, struct kube_response *r, long code, const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static long status(struct apiserver *a, struct kube_response *r, long code, const char *reason, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cJSON *s = cJSON_CreateObject();
	cJSON_AddStringToObject(s, "kind", "Status");
	cJSON_AddStringToObject(s, "apiVersion", "v1");
	cJSON_AddStringToObject(s, "status", code < 300 ? "Success" : "Failure");
	cJSON_AddStringToObject(s, "message", msg);
	cJSON_AddStringToObject(s, "reason", reason);
	cJSON_AddNumberToObject(s, "code", (double)code);
	answer(r, code, s);
	cJSON_Delete(s);
	if (code == 409)
		a->st.conflicts++;
	return code;
}

/* RFC 7386 merge patch of target by patch. */
static void merge_patch(cJSON *target, const cJSON *patch)
{
	const cJSON *p;
	cJSON_ArrayForEach(p, patch) {
		cJSON *t = cJSON_GetObjectItemCaseSensitive(target, p->string);
		if (cJSON_IsNull(p)) {
			cJSON_DeleteItemFromObjectCaseSensitive(target, p->string);
		} else if (cJSON_IsObject(p) && cJSON_IsObject(t)) {
			merge_patch(t, p);
		} else {
			cJSON_DeleteItemFromObjectCaseSensitive(target, p->string);
			cJSON_AddItemToObject(target, p->string, cJSON_Duplicate(p, true));
		}
	}
}

/* Splits "<prefix><ns>/<plural>[/<name>[/<sub>]]". */
static bool split(const char *path, const char *prefix, char *ns, char *plural, char *name, char *sub)
{
	size_t pl = strlen(prefix);
	if (strncmp(path, prefix, pl))
		return false;
	ns[0] = plural[0] = name[0] = sub[0] = '\0';
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", path + pl);
	char *q = strchr(buf, '?');
	if (q)
		*q = '\0';
	char *parts[4] = { ns, plural, name, sub };
	int i = 0;
	for (char *save = NULL, *t = strtok_r(buf, "/", &save); t && i < 4; t = strtok_r(NULL, "/", &save))
		snprintf(parts[i++], 256, "%s", t);
	return i >= 2;
}

static long lease_req(struct apiserver *a, const char *method, const char *ns, const char *name, const char *body,
		      struct kube_response *r)
{
	struct obj *x = name[0] ? find(a, K_LEASE, ns, name) : NULL;
	cJSON *in = body ? cJSON_Parse(body) : NULL;
	long rc;
	if (!strcmp(method, "POST") && !name[0]) {
		const char *n = meta_str(in, "name");
		if (!n) {
			rc = status(a, r, 422, "Invalid", "%s%s", "metadata.name: Required", "");
		} else if (find(a, K_LEASE, ns, n)) {
			rc = status(a, r, 409, "AlreadyExists", "leases.coordination.k8s.io \"%s\" already exists%s", n, "");
		} else {
			cJSON_DeleteItemFromObjectCaseSensitive(obj_child(in, "metadata"), "resourceVersion");
			x = add(a, K_LEASE, ns, n, in);
			in = NULL;
			rc = answer(r, 201, x->json);
		}
	} else if (!x) {
		rc = status(a, r, 404, "NotFound", "leases.coordination.k8s.io \"%s\" not found%s", name, "");
	} else if (!strcmp(method, "GET")) {
		rc = answer(r, 200, x->json);
	} else if (!strcmp(method, "PUT")) {
		const char *rv = meta_str(in, "resourceVersion");
		if (!rv || !rv[0]) {
			rc = status(a, r, 422, "Invalid", "metadata.resourceVersion: must be specified for an update%s%s", "", "");
		} else if (strcmp(rv, meta_str(x->json, "resourceVersion"))) {
			rc = status(a, r, 409, "Conflict",
				    "Operation cannot be fulfilled on leases.coordination.k8s.io \"%s\": the object has been "
				    "modified; please apply your changes to the latest version and try again%s", name, "");
		} else {
			cJSON *md = obj_child(in, "metadata");
			set_str(md, "uid", meta_str(x->json, "uid"));
			commit(a, x, in);
			in = NULL;
			rc = answer(r, 200, x->json);
		}
	} else if (!strcmp(method, "PATCH")) {
		cJSON *copy = cJSON_Duplicate(x->json, true);
		merge_patch(copy, in);
		commit(a, x, copy);
		rc = answer(r, 200, x->json);
	} else if (!strcmp(method, "DELETE")) {
		const cJSON *pre = cJSON_GetObjectItemCaseSensitive(in, "preconditions");
		const char *uid = api_str(pre, "uid"), *rv = api_str(pre, "resourceVersion");
		if ((uid && strcmp(uid, meta_str(x->json, "uid"))) || (rv && strcmp(rv, meta_str(x->json, "resourceVersion")))) {
			rc = status(a, r, 409, "Conflict", "Precondition failed for lease %s%s", name, "");
		} else {
			rc = status(a, r, 200, "", "deleted %s%s", name, "");
			drop(a, x);
		}
	} else {
		rc = status(a, r, 405, "MethodNotAllowed", "%s%s", method, "");
	}
	cJSON_Delete(in);
	return rc;
}

/* A write's preconditions on x (its metadata's uid and resourceVersion, when given): 0, or the 409 answered. */
static long preconditions(struct apiserver *a, const struct obj *x, const cJSON *in, struct kube_response *r)
{
	const char *uid = meta_str(in, "uid"), *version = meta_str(in, "resourceVersion");
	if (uid && strcmp(uid, meta_str(x->json, "uid")))
		return status(a, r, 409, "Conflict", "Precondition failed: UID in precondition: %s, UID in object meta: %s", uid,
			      meta_str(x->json, "uid"));
	if (version && strcmp(version, meta_str(x->json, "resourceVersion")))
		return status(a, r, 409, "Conflict", "Precondition failed: ResourceVersion in precondition: %s, "
			      "ResourceVersion in object meta: %s", version, meta_str(x->json, "resourceVersion"));
	return 0;
}

/* A merge patch of a pod's annotations (the nudge, the reaper's fence); an unchanged pod keeps its version. */
static long pod_patch(struct apiserver *a, struct obj *x, const char *body, struct kube_response *r)
{
	cJSON *in = cJSON_Parse(body ? body : "");
	long rc = preconditions(a, x, in, r);
	if (!rc) {
		cJSON *copy = cJSON_Duplicate(x->json, true);
		merge_patch(obj_child(obj_child(copy, "metadata"), "annotations"), api_path(in, "metadata.annotations"));
		if (cJSON_Compare(copy, x->json, true))
			cJSON_Delete(copy);
		else
			commit(a, x, copy);
		rc = answer(r, 200, x->json);
	}
	cJSON_Delete(in);
	return rc;
}

static long binding(struct apiserver *a, struct obj *x, const char *name, const char *body, struct kube_response *r)
{
	cJSON *in = cJSON_Parse(body ? body : "");
	const char *node = api_str(api_path(in, "target"), "name");
	const char *on = api_str(api_path(x->json, "spec"), "nodeName");
	long rc;
	if (!node || !node[0]) {
		rc = status(a, r, 422, "Invalid", "target.name: Required%s%s", "", "");
	} else if ((rc = preconditions(a, x, in, r))) {
		/* (answered) */
	} else if (on && on[0]) {
		char msg[400];
		snprintf(msg, sizeof(msg), "pod %s is already assigned to node \"%s\"", name, on);
		rc = status(a, r, 409, "Conflict", "%s%s", msg, "");
	} else {
		cJSON *copy = cJSON_Duplicate(x->json, true);
		set_str(obj_child(copy, "spec"), "nodeName", node);
		const cJSON *ann = api_path(in, "metadata.annotations");
		if (ann) {
			cJSON *m = obj_child(copy, "metadata");
			merge_patch(obj_child(m, "annotations"), ann);
		}
		commit(a, x, copy);
		a->st.bindings++;
		rc = status(a, r, 201, "", "bound %s%s", name, "");
	}
	cJSON_Delete(in);
	return rc;
}

/* Whether json's labels satisfy a selector "k=v,k2" (URL-escaped or not). */
static bool selected(const cJSON *json, const char *query)
{
	const char *q = query ? strstr(query, "labelSelector=") : NULL;
	if (!q)
		return true;
	char sel[512];
	size_t n = 0;
	for (q += 14; *q && *q != '&' && n + 1 < sizeof(sel); q++) {
		unsigned v;
		if (*q == '%' && sscanf(q + 1, "%2x", &v) == 1) {
			sel[n++] = (char)v;
			q += 2;
		} else {
			sel[n++] = *q;
		}
	}
	sel[n] = '\0';
	for (char *save = NULL, *t = strtok_r(sel, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(t, '=');
		if (eq)
			*eq = '\0';
		const char *v = label(json, t);
		if (!v || (eq && strcmp(v, eq + 1)))
			return false;
	}
	return true;
}

static long list(struct apiserver *a, enum kind k, const char *ns, const char *path, struct kube_response *r)
{
	cJSON *l = cJSON_CreateObject();
	char rv[32];
	snprintf(rv, sizeof(rv), "%llu", (unsigned long long)a->rv);
	cJSON_AddStringToObject(cJSON_AddObjectToObject(l, "metadata"), "resourceVersion", rv);
	cJSON *items = cJSON_AddArrayToObject(l, "items");
	for (int i = 0; i < a->n; i++)
		if (a->o[i].kind == k && !strcmp(a->o[i].ns, ns) && selected(a->o[i].json, strchr(path, '?')))
			cJSON_AddItemToArray(items, cJSON_Duplicate(a->o[i].json, true));
	long rc = answer(r, 200, l);
	cJSON_Delete(l);
	return rc;
}

long apis_handle(struct apiserver *a, const char *method, const char *path, const char *body,
		 struct kube_response *r)
{
	char ns[256], plural[256], name[256], sub[256];
	a->st.requests++;
	r->retry_after = 0;
	bool get = !strcmp(method, "GET");
	if (split(path, LEASES, ns, plural, name, sub) && !strcmp(plural, "leases") && !sub[0])
		return get && !name[0] ? list(a, K_LEASE, ns, path, r) : lease_req(a, method, ns, name, body, r);
	if (get && split(path, GROUPS, ns, plural, name, sub) && !strcmp(plural, "podgroups") && name[0] && !sub[0]) {
		struct obj *x = find(a, K_GROUP, ns, name);
		return x ? answer(r, 200, x->json) : status(a, r, 404, "NotFound", "podgroups \"%s\" not found%s", name, "");
	}
	if (split(path, PODS, ns, plural, name, sub) && !strcmp(plural, "pods") && get && !name[0])
		return list(a, K_POD, ns, path, r);
	if (split(path, PODS, ns, plural, name, sub) && !strcmp(plural, "pods") && name[0]) {
		struct obj *x = find(a, K_POD, ns, name);
		if (!x)
			return status(a, r, 404, "NotFound", "pods \"%s\" not found%s", name, "");
		if (!strcmp(method, "GET") && !sub[0])
			return answer(r, 200, x->json);
		if (!strcmp(method, "POST") && !strcmp(sub, "binding"))
			return binding(a, x, name, body, r);
		if (!strcmp(method, "PATCH") && !sub[0])
			return pod_patch(a, x, body, r);
	}
	if (!strcmp(method, "PATCH") && strstr(path, "/status"))
		return status(a, r, 200, "", "status recorded%s%s", "", "");   /* GpuClaim and PodGroup status */
	a->st.unmodelled++;
	return status(a, r, 404, "NotFound", "not modelled: %s %s", method, path);
}

/* ---- watches ---- */

void apis_close_watches(struct apiserver *a, int watcher)
{
	for (int i = 0; i < a->nwatchers; i++) {
		if (watcher >= 0 && i != watcher)
			continue;
		for (int k = 0; k < W_KINDS; k++) {
			apis_watch_pop(&a->w[i][k], a->w[i][k].n);
			a->w[i][k].open = false;
			a->w[i][k].closed_ms = a->now_ms;
		}
	}
}

void apis_relist(struct apiserver *a, int watcher, enum watch_kind k, const struct reflector_sink *sink)
{
	struct watch *w = &a->w[watcher][k];
	apis_watch_pop(w, w->n);
	sink->lock(sink->ctx);
	sink->list_begin(sink->ctx);
	for (int i = 0; i < a->n; i++)
		if (matches(a, &a->o[i], a->o[i].json) == (int)k)
			sink->apply(sink->ctx, false, a->o[i].json);
	sink->list_end(sink->ctx);
	sink->unlock(sink->ctx);
	w->open = true;
	w->listed = true;
}

/* ---- pods ---- */

int apis_podgroup_create(struct apiserver *a, const char *ns, const char *name, int min, int timeout_s)
{
	if (find(a, K_GROUP, ns, name))
		return -1;
	char text[512];
	snprintf(text, sizeof(text), "{\"apiVersion\":\"scheduling.x-k8s.io/v1alpha1\",\"kind\":\"PodGroup\","
		 "\"spec\":{\"minMember\":%d,\"scheduleTimeoutSeconds\":%d}}", min, timeout_s);
	add(a, K_GROUP, ns, name, cJSON_Parse(text));
	return 0;
}

int apis_pod_create(struct apiserver *a, const char *ns, const char *name, int gpus, bool managed, const char *group,
		    char *uid, size_t size)
{
	if (find(a, K_POD, ns, name))
		return -1;
	char text[1024], labels[256];
	snprintf(labels, sizeof(labels), "%s%s%s%s%s", managed ? "\"" LABEL_MANAGED "\":\"true\"" : "",
		 managed && group ? "," : "", group ? "\"" LABEL_POD_GROUP "\":\"" : "", group ? group : "", group ? "\"" : "");
	snprintf(text, sizeof(text),
		 "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"labels\":{%s}},"
		 "\"spec\":{\"schedulerName\":\"gpu-scheduler\",\"containers\":[{\"name\":\"c\",\"resources\":"
		 "{\"limits\":{\"gpu.scheduling/gpu\":\"%d\"}}}]},\"status\":{\"phase\":\"Pending\"}}",
		 labels, gpus);
	cJSON *json = cJSON_Parse(text);
	time_t created = (time_t)(DST_WALL0_S + a->now_ms / 1000);
	struct tm tm;
	char ts[32];
	gmtime_r(&created, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	cJSON_AddStringToObject(obj_child(json, "metadata"), "creationTimestamp", ts);
	struct obj *x = add(a, K_POD, ns, name, json);
	snprintf(uid, size, "%s", meta_str(x->json, "uid"));
	return 0;
}

int apis_pod_delete(struct apiserver *a, const char *ns, const char *name)
{
	struct obj *x = find(a, K_POD, ns, name);
	if (!x)
		return -1;
	drop(a, x);
	return 0;
}

int apis_pod_finish(struct apiserver *a, const char *ns, const char *name)
{
	struct obj *x = find(a, K_POD, ns, name);
	if (!x)
		return -1;
	cJSON *copy = cJSON_Duplicate(x->json, true);
	set_str(obj_child(copy, "status"), "phase", "Succeeded");
	commit(a, x, copy);
	return 0;
}

int apis_pod_phase(struct apiserver *a, const char *ns, const char *name, const char *phase)
{
	struct obj *x = find(a, K_POD, ns, name);
	if (!x)
		return -1;
	cJSON *copy = cJSON_Duplicate(x->json, true);
	set_str(obj_child(copy, "status"), "phase", phase);
	commit(a, x, copy);
	return 0;
}

cJSON *apis_node_pods(struct apiserver *a, int node)
{
	cJSON *items = cJSON_CreateArray();
	for (int i = 0; i < a->n; i++)
		if (a->o[i].kind == K_POD && pod_node(a->o[i].json) == node)
			cJSON_AddItemToArray(items, cJSON_Duplicate(a->o[i].json, true));
	return items;
}

void apis_node_relist(struct apiserver *a, int node, enum node_watch_kind k)
{
	struct watch *w = &a->nw[node][k];
	apis_watch_pop(w, w->n);
	w->open = true;
	w->listed = true;
}

int apis_pod_unlabel(struct apiserver *a, const char *ns, const char *name)
{
	struct obj *x = find(a, K_POD, ns, name);
	if (!x)
		return -1;
	cJSON *copy = cJSON_Duplicate(x->json, true);
	cJSON_DeleteItemFromObjectCaseSensitive(obj_child(obj_child(copy, "metadata"), "labels"), LABEL_MANAGED);
	commit(a, x, copy);
	return 0;
}

int apis_gc(struct apiserver *a)
{
	int n = 0;
	for (int i = 0; i < a->n;) {
		struct obj *x = &a->o[i];
		const cJSON *ref, *refs = api_path(x->json, "metadata.ownerReferences");
		bool orphan = false;
		cJSON_ArrayForEach(ref, refs) {
			const char *kind = api_str(ref, "kind"), *uid = api_str(ref, "uid");
			if (!kind || strcmp(kind, "Pod") || !uid)
				continue;
			bool found = false;
			for (int j = 0; j < a->n && !found; j++)
				found = a->o[j].kind == K_POD && !strcmp(meta_str(a->o[j].json, "uid"), uid);
			orphan = !found;
		}
		if (x->kind == K_LEASE && orphan) {
			drop(a, x);
			n++;
		} else {
			i++;
		}
	}
	return n;
}

int apis_pods(struct apiserver *a, struct apis_pod *out, int max)
{
	int n = 0;
	for (int i = 0; i < a->n && n < max; i++) {
		const struct obj *x = &a->o[i];
		if (x->kind != K_POD)
			continue;
		const char *node = api_str(api_path(x->json, "spec"), "nodeName"), *phase = api_str(api_path(x->json, "status"), "phase");
		const char *m = label(x->json, LABEL_MANAGED);
		const cJSON *c0 = cJSON_GetArrayItem(api_path(x->json, "spec.containers"), 0);
		const char *gs = api_str(api_path(c0, "resources.limits"), "gpu.scheduling/gpu");
		out[n++] = (struct apis_pod){
			.ns = x->ns, .name = x->name, .uid = meta_str(x->json, "uid"), .node = node ? node : "",
			.allocated = api_annotation(x->json, ANN_ALLOCATED),
			.finished = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")),
			.managed = m && !strcmp(m, "true"), .gpus = gs ? atoi(gs) : 0,
		};
	}
	return n;
}

int apis_ledger_drop(struct apiserver *a, const char *node, const char *uid)
{
	char name[LEDGER_NAME_MAX + 20], err[256];
	ledger_lease_name(node, name, sizeof(name));
	struct obj *x = find(a, K_LEASE, a->ledger_ns, name);
	struct ledger l;
	if (!x || ledger_decode(x->json, &l, err, sizeof(err)))
		return -1;
	int i = ledger_find(&l, uid), rc = -1;
	if (i >= 0) {
		ledger_remove_at(&l, i);
		struct buf out;
		buf_init(&out, 1 << 20);
		ledger_encode(&l, a->ledger_ns, "kubectl-edit", &out);
		cJSON *json = cJSON_Parse(buf_cstr(&out));
		buf_release(&out);
		set_str(obj_child(json, "metadata"), "uid", meta_str(x->json, "uid"));
		commit(a, x, json);
		rc = 0;
	}
	ledger_release(&l);
	return rc;
}

const cJSON *apis_ledger(struct apiserver *a, const char *node)
{
	char name[LEDGER_NAME_MAX + 20];
	ledger_lease_name(node, name, sizeof(name));
	struct obj *x = find(a, K_LEASE, a->ledger_ns, name);
	return x ? x->json : NULL;
}
