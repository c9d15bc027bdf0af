#include "reflector.h"
#include "log.h"
#include "metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
/*
 * A restarted API server answers 401/403 for a moment, before its
 * authentication and RBAC caches are filled: a refusal counts only when it
 * lasts this long; meanwhile we retry every half second.
 */
#define AUTH_GRACE_S 3
#define IDLE_TIMEOUT_S 120   /* twice the API server's bookmark interval */
#define AUTH_RETRY_MS 500

struct reflector {
	struct reflector_opts o;
	char name[64], path[512], labels[512], fields[512];   /* o's strings point here */
	struct kube_client *client;
	pthread_t thread;
	atomic_bool stop;
	atomic_bool ready;
	pthread_mutex_t lock;          /* guards problem, and the sleep below */
	pthread_cond_t wake;
	char problem[256];
	char rv[64];                   /* resourceVersion to watch from */
	bool need_list;
	bool gone;                     /* the current watch reported 410 */
	bool failed;                   /* ... or another ERROR event */
	int backoff_ms;
	time_t auth_since;             /* when the current 401/403 streak began; 0: none */
	bool retry_soon;               /* the last failure was a refusal within the grace period */
	long retry_after_s;            /* the last refused list's Retry-After, or 0 */
	unsigned seed;
};

static void set_problem(struct reflector *r, const char *msg)
{
	pthread_mutex_lock(&r->lock);
	snprintf(r->problem, sizeof(r->problem), "%s", msg);
	pthread_mutex_unlock(&r->lock);
}

void reflector_problem(const struct reflector *r, char *out, size_t size)
{
	struct reflector *m = (struct reflector *)r;
	pthread_mutex_lock(&m->lock);
	snprintf(out, size, "%s", m->problem);
	pthread_mutex_unlock(&m->lock);
}

bool reflector_ready(const struct reflector *r)
{
	return atomic_load(&((struct reflector *)r)->ready);
}

/* Sleeps ms (or until stopped). */
static void nap(struct reflector *r, long ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&r->lock);
	while (!atomic_load(&r->stop) &&
	       pthread_cond_timedwait(&r->wake, &r->lock, &until) == 0)
		;
	pthread_mutex_unlock(&r->lock);
}

/*
 * The pause after a failure: short within a refusal's grace period, else
 * exponential backoff with full jitter, or Retry-After when that is longer
 * (up to the backoff's longest pause).
 */
static void back_off(struct reflector *r)
{
	if (r->retry_soon) {
		nap(r, AUTH_RETRY_MS);
		return;
	}
	long ms = BACKOFF_MIN_MS + rand_r(&r->seed) % (r->backoff_ms + 1);
	if (r->retry_after_s * 1000 > ms)
		ms = r->retry_after_s * 1000 < BACKOFF_MAX_MS ? r->retry_after_s * 1000 : BACKOFF_MAX_MS;
	r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
	nap(r, ms);
}

/*
 * A refusal by the API server (401/403). Within the grace period it only
 * sets the reason and asks for a quick retry; after that the reflector is
 * not ready, and the first reflector to meet the refusal logs it (one line
 * per streak for the whole client); /readyz gets the reason.
 */
static void auth_problem(struct reflector *r, long status, const char *msg)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!r->auth_since)
		r->auth_since = now.tv_sec;
	r->retry_soon = now.tv_sec - r->auth_since < AUTH_GRACE_S;
	/* kube_watch's errors start with "HTTP <status>: " already. */
	char prefix[32];
	int pl = snprintf(prefix, sizeof(prefix), "HTTP %ld: ", status);
	if (pl > 0 && !strncmp(msg, prefix, (size_t)pl))
		msg += pl;
	char line[256];
	snprintf(line, sizeof(line), "%s: %s (HTTP %ld: %s)", r->o.name,
		 status == 401 ? "the API server rejected our credentials" : "RBAC forbids it", status, msg);
	set_problem(r, line);
	if (r->retry_soon)
		return;
	atomic_store(&r->ready, false);
	if (kube_client_auth_refused(r->client, status))
		log_error(status == 401 ? "the API server rejected our credentials (expired or wrong token?)"
					: "the API server forbids what we need (check the RBAC in deploy/)",
			  "resource=%s status=%ld error=\"%s\"", r->o.name, status, LOG_Q(msg));
}

static const char *obj_rv(const cJSON *obj)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
	const cJSON *rv = cJSON_GetObjectItemCaseSensitive(m, "resourceVersion");
	return cJSON_IsString(rv) ? rv->valuestring : NULL;
}

static int build_path(struct reflector *r, struct buf *p, bool watch, const char *cont)
{
	buf_clear(p);
	buf_adds(p, r->o.path);
	buf_adds(p, "?");
	if (watch) {
		int t = r->o.watch_timeout_s ? r->o.watch_timeout_s : 300;
		/* Ended by the server before it could count as silent, bookmarks or not. */
		if (r->o.idle_timeout_s > 0 && t > r->o.idle_timeout_s * 3 / 4)
			t = r->o.idle_timeout_s * 3 / 4 > 0 ? r->o.idle_timeout_s * 3 / 4 : 1;
		buf_printf(p, "watch=1&allowWatchBookmarks=true&timeoutSeconds=%d&resourceVersion=", t);
		kube_escape(p, r->rv);
	} else {
		buf_printf(p, "limit=%d", r->o.page_limit ? r->o.page_limit : 500);
		if (cont && *cont) {
			buf_adds(p, "&continue=");
			kube_escape(p, cont);
		}
	}
	if (r->o.label_selector && *r->o.label_selector) {
		buf_adds(p, "&labelSelector=");
		kube_escape(p, r->o.label_selector);
	}
	if (r->o.field_selector && *r->o.field_selector) {
		buf_adds(p, "&fieldSelector=");
		kube_escape(p, r->o.field_selector);
	}
	return 0;
}

/*
 * One page of a LIST into the sink, under its lock: the first page begins the
 * list, the last (no continue token) ends it and sets r->rv; on other pages
 * cont takes the token for the next. True on the last page.
 */
static bool apply_page(struct reflector *r, const cJSON *page, const cJSON *list_items, bool first,
		       struct buf *cont, int *items)
{
	const struct reflector_sink *s = &r->o.sink;
	s->lock(s->ctx);
	if (first)
		s->list_begin(s->ctx);
	const cJSON *it;
	cJSON_ArrayForEach(it, list_items) {
		s->apply(s->ctx, false, it);
		(*items)++;
	}
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(page, "metadata");
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(meta, "continue");
	const cJSON *rv = cJSON_GetObjectItemCaseSensitive(meta, "resourceVersion");
	bool last = !cJSON_IsString(c) || !*c->valuestring;
	if (last) {
		s->list_end(s->ctx);
		snprintf(r->rv, sizeof(r->rv), "%s", cJSON_IsString(rv) ? rv->valuestring : "");
	} else {
		buf_clear(cont);
		buf_adds(cont, c->valuestring);
	}
	s->unlock(s->ctx);
	return last;
}

/* A full LIST, page by page; 0 on success (r->rv set), -1 to back off. */
static int list_all(struct reflector *r)
{
	struct buf path, cont;
	buf_init(&path, 8192);
	buf_init(&cont, 8192);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = -1, items = 0;
	bool begun = false;
	r->retry_after_s = 0;
	for (;;) {
		build_path(r, &path, false, buf_cstr(&cont));
		char err[256];
		if (kube_request(r->client, "GET", buf_cstr(&path), NULL, NULL, 60, &resp, err, sizeof(err))) {
			set_problem(r, err);
			log_warn("list failed", "resource=%s error=\"%s\"", r->o.name, LOG_Q(err));
			goto out;
		}
		if (resp.status != 200) {
			char msg[200];
			kube_status_message(&resp, msg, sizeof(msg));
			r->retry_after_s = resp.retry_after;
			if (resp.status == 401 || resp.status == 403)
				auth_problem(r, resp.status, msg);
			else
				log_warn("list refused", "resource=%s status=%ld error=\"%s\"", r->o.name, resp.status,
					 LOG_Q(msg));
			if (resp.status == 410 && cont.len) {
				/* The continue token expired: start the list again. */
				buf_clear(&cont);
				continue;
			}
			goto out;
		}
		cJSON *page = cJSON_ParseWithLength(resp.body.data, resp.body.len);
		const cJSON *list_items = cJSON_GetObjectItemCaseSensitive(page, "items");
		if (!cJSON_IsObject(page) || (list_items && !cJSON_IsNull(list_items) && !cJSON_IsArray(list_items))) {
			cJSON_Delete(page);
			set_problem(r, "the API server sent a list that is not JSON");
			goto out;
		}
		bool last = apply_page(r, page, list_items, !begun, &cont, &items);
		begun = true;
		cJSON_Delete(page);
		if (last)
			break;
	}
	rc = 0;
	metrics_inc(M_RELISTS, r->o.resource);
	log_info("listed", "resource=%s items=%d resourceVersion=%s", r->o.name, items, r->rv);
out:
	/*
	 * A list that broke off after some pages ends without list_end: the
	 * objects of the pages not received are not gone, so nothing is swept;
	 * the next complete list sweeps.
	 */
	kube_response_release(&resp);
	buf_release(&path);
	buf_release(&cont);
	return rc;
}

struct batch {
	struct reflector *r;
	bool locked;
};

static int on_event(void *ctx, const cJSON *ev)
{
	struct batch *b = ctx;
	struct reflector *r = b->r;
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(ev, "object");
	if (!cJSON_IsString(type) || !cJSON_IsObject(obj))
		return 0;
	const char *t = type->valuestring;
	if (!strcmp(t, "ERROR")) {
		const cJSON *code = cJSON_GetObjectItemCaseSensitive(obj, "code");
		const cJSON *reason = cJSON_GetObjectItemCaseSensitive(obj, "reason");
		bool gone = (cJSON_IsNumber(code) && code->valuedouble == 410) ||
			    (cJSON_IsString(reason) && (!strcmp(reason->valuestring, "Expired") ||
							!strcmp(reason->valuestring, "Gone")));
		const cJSON *msg = cJSON_GetObjectItemCaseSensitive(obj, "message");
		log_info(gone ? "watch expired; relisting" : "watch error event", "resource=%s message=\"%s\"",
			 r->o.name, LOG_Q(cJSON_IsString(msg) ? msg->valuestring : ""));
		r->gone = gone;
		r->failed = !gone;
		return 1;
	}
	const char *rv = obj_rv(obj);
	if (!strcmp(t, "BOOKMARK")) {
		if (rv)
			snprintf(r->rv, sizeof(r->rv), "%s", rv);
		return 0;
	}
	bool deleted = !strcmp(t, "DELETED");
	if (!deleted && strcmp(t, "ADDED") && strcmp(t, "MODIFIED"))
		return 0;
	if (!b->locked) {
		r->o.sink.lock(r->o.sink.ctx);
		b->locked = true;
	}
	r->o.sink.apply(r->o.sink.ctx, deleted, obj);
	if (rv)
		snprintf(r->rv, sizeof(r->rv), "%s", rv);
	metrics_inc(M_WATCH_EVENTS, r->o.resource);
	metrics_event_seen(r->o.resource);
	return 0;
}

/* One read's worth of events goes out as one snapshot. */
static void on_flush(void *ctx)
{
	struct batch *b = ctx;
	if (b->locked) {
		b->r->o.sink.unlock(b->r->o.sink.ctx);
		b->locked = false;
	}
}

static void *run(void *arg)
{
	struct reflector *r = arg;
	struct buf path;
	buf_init(&path, 8192);
	r->need_list = true;
	r->backoff_ms = BACKOFF_MIN_MS;
	while (!atomic_load(&r->stop)) {
		if (r->need_list) {
			r->retry_soon = false;
			if (list_all(r)) {
				back_off(r);
				continue;
			}
			r->need_list = false;
			r->backoff_ms = BACKOFF_MIN_MS;
			r->auth_since = 0;
			kube_client_auth_ok(r->client);
			set_problem(r, "");
			atomic_store(&r->ready, true);
		}
		build_path(r, &path, true, NULL);
		struct batch b = { r, false };
		struct kube_watch_ops ops = { on_event, on_flush, &b, r->o.idle_timeout_s > 0 ? r->o.idle_timeout_s : 0 };
		long status = 0;
		char err[512] = "";
		r->gone = r->failed = false;
		int rc = kube_watch(r->client, buf_cstr(&path), &ops, &r->stop, &status, err, sizeof(err));
		on_flush(&b);
		if (atomic_load(&r->stop))
			break;
		metrics_inc(M_WATCH_RESTARTS, r->o.resource);
		if (rc == KUBE_WATCH_SILENT) {
			/* Events may be missing, not only late: not ready until a new list. */
			log_warn("watch silent; not ready until listed again", "resource=%s error=\"%s\"", r->o.name,
				 LOG_Q(err));
			char line[600];
			snprintf(line, sizeof(line), "%s: watch silent, listing again: %s", r->o.name, err);
			set_problem(r, line);
			atomic_store(&r->ready, false);
			r->need_list = true;
			continue;
		}
		if (r->gone || status == 410) {
			r->need_list = true;
			continue;
		}
		if (status == 401 || status == 403) {
			auth_problem(r, status, err);
			r->need_list = true;    /* the cache may have missed events meanwhile */
			back_off(r);
			continue;
		}
		if (rc || r->failed) {
			log_warn("watch failed; retrying", "resource=%s status=%ld error=\"%s\"", r->o.name, status,
				 LOG_Q(err));
			set_problem(r, err);
			back_off(r);
			continue;
		}
		r->backoff_ms = BACKOFF_MIN_MS;   /* the server ended the stream: watch again */
	}
	buf_release(&path);
	return NULL;
}

struct reflector *reflector_start(struct kube_client *c, const struct reflector_opts *o,
				  char *err, size_t errlen)
{
	struct reflector *r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->o = *o;
	snprintf(r->name, sizeof(r->name), "%s", o->name);
	snprintf(r->path, sizeof(r->path), "%s", o->path);
	snprintf(r->labels, sizeof(r->labels), "%s", o->label_selector ? o->label_selector : "");
	snprintf(r->fields, sizeof(r->fields), "%s", o->field_selector ? o->field_selector : "");
	r->o.name = r->name;
	r->o.path = r->path;
	r->o.label_selector = r->labels;
	r->o.field_selector = r->fields;
	if (!r->o.idle_timeout_s)
		r->o.idle_timeout_s = IDLE_TIMEOUT_S;
	r->client = c;
	r->seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)r;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->wake, NULL);
	snprintf(r->problem, sizeof(r->problem), "%s: not listed yet", o->name);
	if (pthread_create(&r->thread, NULL, run, r)) {
		snprintf(err, errlen, "cannot start the %s reflector thread", o->name);
		free(r);
		return NULL;
	}
	return r;
}

void reflector_stop(struct reflector *r)
{
	if (!r)
		return;
	atomic_store(&r->stop, true);
	pthread_mutex_lock(&r->lock);
	pthread_cond_broadcast(&r->wake);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->wake);
	free(r);
}
