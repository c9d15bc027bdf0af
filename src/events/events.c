/*
 * The Event recorder (include/events.h). The callers' side is events_post:
 * the message formatted and hashed outside the lock, then under it a
 * repeat already queued is folded into the queued one (its count grows),
 * else the Event is copied into the ring, or dropped when the ring is full.
 * The drainer thread takes one at a time and alone owns the tables below:
 * what was posted lately (to PATCH a repeat), the per-object buckets, and
 * the last post per object and reason (every_s). The tables are
 * direct-mapped by hash, like kube's LRU caches a bounded memory: a
 * collision forgets the older entry (its repeat makes a new Event).
 */
#include "events.h"

#include "clock.h"
#include "kube.h"
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 1024

struct item {
	uint64_t key;              /* object, type, reason and message */
	uint64_t okey;             /* object */
	uint64_t rkey;             /* object and reason */
	int every_s;
	int count;                 /* posts folded into this one */
	enum events_type type;
	char api_version[64], kind[32], ns[64], name[254], uid[64], reason[64], message[512];
};

/* An Event this recorder made lately: a repeat PATCHes it. */
struct seen {
	uint64_t key;
	int64_t last_ms;
	int count;
	char ns[64], name[300];
};

struct bucket {
	uint64_t okey;
	double tokens;
	int64_t at_ms;
};

struct every {
	uint64_t rkey;
	int64_t last_ms;
};

struct events {
	struct kube_client *kube;
	char component[64], instance[254];
	int cap, burst, refill_s, window_s;
	long timeout_s;
	bool warnings_only;
	pthread_t thread;

	pthread_mutex_t mu;        /* guards the ring, stop and busy */
	pthread_cond_t wake, idle;
	struct item *ring;
	int head, len;
	bool stop, busy;

	/* the drainer's own */
	struct seen *seen;
	struct bucket *buckets;
	struct every *every;
	bool failing;

	atomic_uint_fast64_t counts[EVENTS_NRESULT];
};

/* ---- keys ---- */

static uint64_t fnv(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return (h ^ 0xff) * 1099511628211ull;    /* a separator: "ab","c" differs from "a","bc" */
}

static void keys(struct item *it)
{
	uint64_t h = fnv(fnv(fnv(fnv(14695981039346656037ull, it->api_version), it->kind), it->ns), it->name);
	it->okey = h;
	it->rkey = fnv(h, it->reason);
	it->key = fnv(fnv(it->rkey, it->type == EVENTS_WARNING ? "W" : "N"), it->message);
}

static bool same(const struct item *a, const struct item *b)
{
	return a->key == b->key && a->type == b->type && !strcmp(a->name, b->name) && !strcmp(a->ns, b->ns) &&
	       !strcmp(a->kind, b->kind) && !strcmp(a->reason, b->reason) && !strcmp(a->message, b->message);
}

/* ---- the API calls ---- */

/* "/api/v1/namespaces/ns/pods" or "/apis/group/version/..." with the kind's plural; name appended. */
static void object_path(const struct item *it, char *out, size_t size)
{
	char plural[40];
	size_t n = 0;
	for (const char *k = it->kind; *k && n < sizeof(plural) - 2; k++)
		plural[n++] = (char)(*k >= 'A' && *k <= 'Z' ? *k - 'A' + 'a' : *k);
	plural[n++] = 's';
	plural[n] = '\0';
	bool core = !strchr(it->api_version, '/');
	if (it->ns[0])
		snprintf(out, size, "/api%s/%s/namespaces/%s/%s/%s", core ? "" : "s", it->api_version, it->ns, plural,
			 it->name);
	else
		snprintf(out, size, "/api%s/%s/%s/%s", core ? "" : "s", it->api_version, plural, it->name);
}

/* One request: 0 with the status in *status, -1 when the server was not reached. */
static int call(struct events *e, const char *method, const char *path, const char *body, const char *type,
		long *status, cJSON **reply, char *err, size_t errlen)
{
	struct kube_response r;
	kube_response_init(&r);
	int rc = kube_request(e->kube, method, path, body, type, e->timeout_s, &r, err, errlen);
	*status = r.status;
	if (!rc && r.status >= 300) {
		char m[200];
		snprintf(err, errlen, "HTTP %ld: %s", r.status, kube_status_message(&r, m, sizeof(m)));
	}
	if (!rc && reply && r.status < 300)
		*reply = cJSON_ParseWithLength(r.body.data, r.body.len);
	kube_response_release(&r);
	return rc;
}

/* The object's uid (kubectl describe finds Events by it): 0, 1 when the object is gone, -1 unreadable. */
static int read_uid(struct events *e, struct item *it, char *err, size_t errlen)
{
	char path[800];
	object_path(it, path, sizeof(path));
	long status;
	cJSON *obj = NULL;
	if (call(e, "GET", path, NULL, NULL, &status, &obj, err, errlen) || status != 200) {
		cJSON_Delete(obj);
		return status == 404 ? 1 : -1;
	}
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "uid");
	bool ok = cJSON_IsString(u) && u->valuestring[0];
	if (ok)
		snprintf(it->uid, sizeof(it->uid), "%s", u->valuestring);
	else
		snprintf(err, errlen, "%s %s has no uid", it->kind, it->name);
	cJSON_Delete(obj);
	return ok ? 0 : -1;
}

/* A repeat: the Event's count and lastTimestamp. 1 when the Event is gone (its TTL passed). */
static int patch(struct events *e, struct seen *s, int count, char *err, size_t errlen)
{
	char path[600], ts[32], body[160];
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events/%s", s->ns, s->name);
	clock_wall_rfc3339(ts, sizeof(ts));
	snprintf(body, sizeof(body), "{\"count\":%d,\"lastTimestamp\":\"%s\"}", s->count + count, ts);
	long status;
	if (call(e, "PATCH", path, body, "application/merge-patch+json", &status, NULL, err, errlen))
		return -1;
	if (status == 404)
		return 1;
	if (status >= 300)
		return -1;
	s->count += count;
	return 0;
}

static char *event_json(struct events *e, const struct item *it, const char *ns)
{
	char ts[32], gen[300];
	clock_wall_rfc3339(ts, sizeof(ts));
	snprintf(gen, sizeof(gen), "%.240s.", it->name);
	cJSON *ev = cJSON_CreateObject();
	cJSON_AddStringToObject(ev, "apiVersion", "v1");
	cJSON_AddStringToObject(ev, "kind", "Event");
	cJSON *md = cJSON_AddObjectToObject(ev, "metadata");
	cJSON_AddStringToObject(md, "generateName", gen);
	cJSON_AddStringToObject(md, "namespace", ns);
	cJSON *io = cJSON_AddObjectToObject(ev, "involvedObject");
	cJSON_AddStringToObject(io, "apiVersion", it->api_version);
	cJSON_AddStringToObject(io, "kind", it->kind);
	if (it->ns[0])
		cJSON_AddStringToObject(io, "namespace", it->ns);
	cJSON_AddStringToObject(io, "name", it->name);
	cJSON_AddStringToObject(io, "uid", it->uid);
	cJSON_AddStringToObject(ev, "reason", it->reason);
	cJSON_AddStringToObject(ev, "message", it->message);
	cJSON_AddStringToObject(ev, "type", it->type == EVENTS_WARNING ? "Warning" : "Normal");
	cJSON *src = cJSON_AddObjectToObject(ev, "source");
	cJSON_AddStringToObject(src, "component", e->component);
	cJSON_AddStringToObject(src, "host", e->instance);
	cJSON_AddStringToObject(ev, "reportingComponent", e->component);
	cJSON_AddStringToObject(ev, "reportingInstance", e->instance);
	cJSON_AddStringToObject(ev, "firstTimestamp", ts);
	cJSON_AddStringToObject(ev, "lastTimestamp", ts);
	cJSON_AddNumberToObject(ev, "count", it->count);
	char *body = cJSON_PrintUnformatted(ev);
	cJSON_Delete(ev);
	return body;
}

/* A new Event (0), the seen slot remembering it for repeats; 2 when its object is gone, -1 failed. */
static int create(struct events *e, struct item *it, struct seen *s, char *err, size_t errlen)
{
	int rc = it->uid[0] ? 0 : read_uid(e, it, err, errlen);
	if (rc)
		return rc > 0 ? 2 : -1;
	const char *ns = it->ns[0] ? it->ns : "default";
	char *body = event_json(e, it, ns);
	if (!body) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	char path[200];
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
	long status;
	cJSON *made = NULL;
	rc = call(e, "POST", path, body, NULL, &status, &made, err, errlen);
	free(body);
	if (rc || status >= 300) {
		cJSON_Delete(made);
		return -1;
	}
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(made, "metadata"), "name");
	memset(s, 0, sizeof(*s));
	if (cJSON_IsString(name)) {
		s->key = it->key;
		s->count = it->count;
		snprintf(s->ns, sizeof(s->ns), "%s", ns);
		snprintf(s->name, sizeof(s->name), "%s", name->valuestring);
	}
	cJSON_Delete(made);
	return 0;
}

/* ---- the drainer ---- */

/* The object's bucket: false when it has no token left. */
static bool take_token(struct events *e, const struct item *it, int64_t now)
{
	struct bucket *b = &e->buckets[it->okey % SLOTS];
	if (b->okey != it->okey) {
		b->okey = it->okey;
		b->tokens = e->burst;
	} else {
		b->tokens += (double)(now - b->at_ms) / (e->refill_s * 1000.0);
		if (b->tokens > e->burst)
			b->tokens = e->burst;
	}
	b->at_ms = now;
	if (b->tokens < 1)
		return false;
	b->tokens -= 1;
	return true;
}

static enum events_result deliver(struct events *e, struct item *it)
{
	int64_t now = clock_mono_ms();
	struct every *ev = &e->every[it->rkey % SLOTS];
	if (it->every_s > 0 && ev->rkey == it->rkey && now - ev->last_ms < it->every_s * 1000LL)
		return EVENTS_LIMITED;
	if (!take_token(e, it, now))
		return EVENTS_LIMITED;
	if (it->every_s > 0) {
		ev->rkey = it->rkey;
		ev->last_ms = now;
	}
	char err[512] = "";
	struct seen *s = &e->seen[it->key % SLOTS];
	int rc = 1;
	if (s->key == it->key && s->name[0] && now - s->last_ms < e->window_s * 1000LL)
		rc = patch(e, s, it->count, err, sizeof(err));
	enum events_result res = EVENTS_PATCHED;
	if (rc > 0) {
		rc = create(e, it, s, err, sizeof(err));
		res = EVENTS_SENT;
	}
	if (rc == 2)
		return EVENTS_GONE;    /* nobody to tell */
	if (rc) {
		if (!e->failing)
			log_warn("cannot post an Event", "object=%s/%s/%s reason=%s error=\"%s\"", it->kind, it->ns,
				 it->name, it->reason, LOG_Q(err));
		e->failing = true;
		return EVENTS_FAILED;
	}
	if (e->failing)
		log_info("Events are posted again", "reason=%s", it->reason);
	e->failing = false;
	s->last_ms = now;
	return res;
}

static void *drain(void *arg)
{
	struct events *e = arg;
	struct item *it = malloc(sizeof(*it));
	pthread_mutex_lock(&e->mu);
	while (it && !e->stop) {
		if (!e->len) {
			e->busy = false;
			pthread_cond_broadcast(&e->idle);
			pthread_cond_wait(&e->wake, &e->mu);
			continue;
		}
		*it = e->ring[e->head];
		e->head = (e->head + 1) % e->cap;
		e->len--;
		e->busy = true;
		pthread_mutex_unlock(&e->mu);
		atomic_fetch_add(&e->counts[deliver(e, it)], 1);
		pthread_mutex_lock(&e->mu);
	}
	e->busy = false;
	pthread_cond_broadcast(&e->idle);
	pthread_mutex_unlock(&e->mu);
	free(it);
	return NULL;
}

/* ---- the interface ---- */

static int or_default(int v, int def)
{
	return v > 0 ? v : def;
}

/* Everything events_new made, once no thread uses it. */
static void release(struct events *e)
{
	pthread_cond_destroy(&e->idle);
	pthread_cond_destroy(&e->wake);
	pthread_mutex_destroy(&e->mu);
	free(e->ring);
	free(e->seen);
	free(e->buckets);
	free(e->every);
	free(e);
}

struct events *events_new(struct kube_client *kube, const struct events_opts *o)
{
	struct events *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->kube = kube;
	snprintf(e->component, sizeof(e->component), "%s", o->component ? o->component : "gpu-extender");
	snprintf(e->instance, sizeof(e->instance), "%s", o->instance ? o->instance : "");
	e->cap = or_default(o->queue, 4096);
	e->burst = or_default(o->burst, 25);
	e->refill_s = or_default(o->refill_s, 300);
	e->window_s = or_default(o->window_s, 600);
	e->timeout_s = o->timeout_s > 0 ? o->timeout_s : 10;
	e->warnings_only = o->warnings_only;
	e->ring = calloc((size_t)e->cap, sizeof(*e->ring));
	e->seen = calloc(SLOTS, sizeof(*e->seen));
	e->buckets = calloc(SLOTS, sizeof(*e->buckets));
	e->every = calloc(SLOTS, sizeof(*e->every));
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->wake, NULL);
	pthread_cond_init(&e->idle, NULL);
	if (e->ring && e->seen && e->buckets && e->every && !pthread_create(&e->thread, NULL, drain, e))
		return e;
	log_error("cannot start the Event recorder; no Events are posted", "component=%s", e->component);
	release(e);
	return NULL;
}

void events_free(struct events *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	e->stop = true;
	pthread_cond_signal(&e->wake);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->thread, NULL);
	release(e);
}

static bool enqueue(struct events *e, const struct events_object *o, enum events_type type, const char *reason,
		    int every_s, const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));
static bool enqueue(struct events *e, const struct events_object *o, enum events_type type, const char *reason,
		    int every_s, const char *fmt, va_list ap)
{
	struct item it;
	snprintf(it.api_version, sizeof(it.api_version), "%s", o->api_version ? o->api_version : "v1");
	snprintf(it.kind, sizeof(it.kind), "%s", o->kind ? o->kind : "Pod");
	snprintf(it.ns, sizeof(it.ns), "%s", o->ns ? o->ns : "");
	snprintf(it.name, sizeof(it.name), "%s", o->name ? o->name : "");
	snprintf(it.uid, sizeof(it.uid), "%s", o->uid ? o->uid : "");
	snprintf(it.reason, sizeof(it.reason), "%s", reason);
	vsnprintf(it.message, sizeof(it.message), fmt, ap);
	it.type = type;
	it.every_s = every_s;
	it.count = 1;
	if (!it.name[0])
		return false;
	keys(&it);
	bool queued = true;
	pthread_mutex_lock(&e->mu);
	int k = 0;
	for (; k < e->len; k++) {
		struct item *q = &e->ring[(e->head + k) % e->cap];
		if (same(q, &it)) {
			q->count++;
			break;
		}
	}
	if (k == e->len) {
		if (e->len == e->cap) {
			queued = false;
		} else {
			e->ring[(e->head + e->len++) % e->cap] = it;
			pthread_cond_signal(&e->wake);
		}
	}
	pthread_mutex_unlock(&e->mu);
	if (!queued)
		atomic_fetch_add(&e->counts[EVENTS_DROPPED], 1);
	return queued;
}

bool events_wants(const struct events *e, enum events_type type)
{
	return e && !(e->warnings_only && type == EVENTS_NORMAL);
}

bool events_post(struct events *e, const struct events_object *o, enum events_type type, const char *reason,
		 int every_s, const char *fmt, ...)
{
	if (!events_wants(e, type) || !o)
		return false;
	va_list ap;
	va_start(ap, fmt);
	bool ok = enqueue(e, o, type, reason, every_s, fmt, ap);
	va_end(ap);
	return ok;
}

bool events_pod(struct events *e, const char *ns, const char *name, const char *uid, enum events_type type,
		const char *reason, int every_s, const char *fmt, ...)
{
	if (!events_wants(e, type))
		return false;
	struct events_object o = { .api_version = "v1", .kind = "Pod", .ns = ns, .name = name, .uid = uid };
	va_list ap;
	va_start(ap, fmt);
	bool ok = enqueue(e, &o, type, reason, every_s, fmt, ap);
	va_end(ap);
	return ok;
}

void events_counts(struct events *e, uint64_t *out)
{
	for (int k = 0; k < EVENTS_NRESULT; k++)
		out[k] = e ? atomic_load(&e->counts[k]) : 0;
}

bool events_idle(struct events *e, int timeout_ms)
{
	if (!e)
		return true;
	struct timespec until = clock_deadline_ms(timeout_ms);
	pthread_mutex_lock(&e->mu);
	int rc = 0;
	while ((e->len || e->busy) && !e->stop && rc == 0)
		rc = pthread_cond_timedwait(&e->idle, &e->mu, &until);
	bool idle = !e->len && !e->busy;
	pthread_mutex_unlock(&e->mu);
	return idle;
}
