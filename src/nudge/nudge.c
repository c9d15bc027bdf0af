/*
 * The nudger (include/nudge.h). Callers' side: nudge_waiting and
 * nudge_forget keep the table of waiting pods (a map by uid, under the
 * mutex), nudge_gained notes a node's name (the cache's writer lock is
 * held meanwhile: a mutex and a copy, nothing more). The thread alone
 * reads the cache and talks to the API server: for the nodes noted, the
 * waiting pods that fit there now, oldest first, each counted against the
 * ones before it, get one annotation PATCHed, as the token bucket allows.
 */
#include "nudge.h"

#include "api.h"
#include "buf.h"
#include "cache.h"
#include "clock.h"
#include "fit.h"
#include "kube.h"
#include "log.h"
#include "strmap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GAINED_MAX 1024       /* nodes noted at once; more: every node is looked at */
#define FIT_BUDGET (1 << 20)  /* fits tried in one pass at most (every node looked at, many pods waiting) */
#define SWEEP_MS 30000        /* the table is swept of pods not seen for keep_s this often at least */

/* A pod no node fitted, as filter last saw it. */
struct waiter {
	char uid[64], ns[64], name[254];
	bool retry;                /* a gang member that another try may place (nudge_retry): no claim */
	int tries;                 /* its rejections so (kube-scheduler's backoff doubles with each) */
	uint64_t since;            /* order of the first rejection: the oldest are nudged first */
	int64_t seen_ms;           /* last rejected */
	int64_t nudged_ms;         /* last nudged; 0: never */
	size_t len;
	unsigned char *claim;      /* claim_pack's bytes */
};

/* What the thread works on: one waiting pod, copied out of the table. */
struct cand {
	struct claim claim;
	char uid[64], ns[64], name[254];
	uint64_t since;
	const char *node;          /* the node it fits on (the snapshot's name), or NULL */
	bool retry;
};

struct nudge {
	struct nudge_opts o;
	pthread_t thread;
	pthread_mutex_t mu;        /* guards what follows up to the thread's own */
	pthread_cond_t wake, idle;
	struct strmap waiters;     /* uid -> struct waiter * */
	atomic_int nwaiting;
	uint64_t waiters_made;     /* the next waiter's since */
	char *gained[GAINED_MAX];
	int ngained;
	bool all;                  /* more nodes gained than noted: look at every node */
	int64_t gained_wall_ms;    /* when the first of those was noted */
	int64_t retry_due_ms;      /* when the first gang member waiting for a retry is due; 0: none */
	bool stop, busy;

	/* the thread's own */
	struct nudge_bucket bucket;
	int64_t swept_ms;

	atomic_uint_fast64_t counts[NUDGE_NRESULT];
};

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the pure parts ------------------------------------------------------ */

void nudge_bucket_init(struct nudge_bucket *b, double rate, double burst, int64_t now_ms)
{
	*b = (struct nudge_bucket){ .tokens = burst, .rate = rate, .burst = burst, .at_ms = now_ms };
}

bool nudge_bucket_take(struct nudge_bucket *b, int64_t now_ms)
{
	if (now_ms > b->at_ms) {
		b->tokens += (double)(now_ms - b->at_ms) * b->rate / 1000.0;
		if (b->tokens > b->burst)
			b->tokens = b->burst;
		b->at_ms = now_ms;
	}
	if (b->tokens < 1.0)
		return false;
	b->tokens -= 1.0;
	return true;
}

int nudge_fits(const struct gpu_node *n, const struct claim *const *c, int nc, bool *fits)
{
	struct gpu_node *room = gpu_node_clone(n);
	if (!room)
		return -1;
	int count = 0;
	for (int i = 0; i < nc; i++) {
		struct fit f;
		fits[i] = claim_wants_gpu(c[i]) && fit_node(room, c[i], PACK_BINPACK, &f);
		if (fits[i]) {
			fit_apply(room, c[i], &f);
			count++;
		}
	}
	gpu_node_free(room);
	return count;
}

/* ---- the table ----------------------------------------------------------- */

static void waiter_free(struct waiter *w)
{
	if (w)
		free(w->claim);
	free(w);
}

/* The waiter that was rejected longest ago, to make room. Under mu. */
static struct waiter *stalest(struct nudge *n)
{
	struct waiter *old = NULL;
	const char *k;
	void *v;
	for (size_t pos = 0; strmap_next(&n->waiters, &pos, &k, &v);) {
		struct waiter *w = v;
		if (!old || w->seen_ms < old->seen_ms)
			old = w;
	}
	return old;
}

static void drop(struct nudge *n, struct waiter *w)
{
	strmap_del(&n->waiters, w->uid);
	waiter_free(w);
	atomic_fetch_sub(&n->nwaiting, 1);
}

/* Under mu: puts a new waiter, room made first. -1 when out of memory. */
static int put_new(struct nudge *n, struct waiter *w)
{
	if ((int)n->waiters.len >= n->o.keep) {
		struct waiter *old = stalest(n);
		if (old)
			drop(n, old);
	}
	if (strmap_put(&n->waiters, w->uid, w, NULL))
		return -1;
	atomic_fetch_add(&n->nwaiting, 1);
	return 0;
}

/* Under mu: the pod's waiter as filter rejected it now (bytes: its packed claim, taken; NULL for a retry). */
static struct waiter *note(struct nudge *n, const struct api_pod_ref *pod, unsigned char *bytes, size_t len,
			   bool retry)
{
	int64_t now = clock_mono_ms();
	struct waiter *w = strmap_get(&n->waiters, pod->uid);
	if (!w && (w = calloc(1, sizeof(*w)))) {
		snprintf(w->uid, sizeof(w->uid), "%s", pod->uid);
		snprintf(w->ns, sizeof(w->ns), "%s", pod->ns ? pod->ns : "");
		snprintf(w->name, sizeof(w->name), "%s", pod->name);
		w->since = n->waiters_made++;
		if (put_new(n, w)) {
			waiter_free(w);
			w = NULL;
		}
	}
	if (!w) {
		free(bytes);
		return NULL;
	}
	free(w->claim);    /* its claim as seen last */
	w->claim = bytes, w->len = len, w->seen_ms = now, w->retry = retry;
	w->tries = retry ? w->tries + 1 : 0;
	return w;
}

/*
 * How long after its last rejection a gang member is nudged: past the
 * backoff kube-scheduler gives it (doubling with each failed try, to ten
 * times the first), so that a try its siblings' binds set off comes first
 * and the nudge wakes only a member nothing else will.
 */
static int64_t retry_wait(const struct nudge *n, const struct waiter *w)
{
	int64_t ms = n->o.retry_delay_ms;
	for (int k = 1; k < w->tries && ms < 10LL * n->o.retry_delay_ms; k++)
		ms *= 2;
	return ms < 10LL * n->o.retry_delay_ms ? ms : 10LL * n->o.retry_delay_ms;
}

static bool pod_ok(const struct nudge *n, const struct api_pod_ref *pod)
{
	return n && pod->uid && pod->uid[0] && pod->name && strlen(pod->uid) < sizeof(((struct waiter *)0)->uid);
}

void nudge_waiting(struct nudge *n, const struct api_pod_ref *pod, const struct claim *c)
{
	if (!pod_ok(n, pod))
		return;
	struct buf packed;
	buf_init(&packed, (size_t)1 << 20);
	if (claim_pack(c, &packed)) {
		buf_release(&packed);
		return;
	}
	size_t len;
	unsigned char *bytes = (unsigned char *)buf_detach(&packed, &len);
	pthread_mutex_lock(&n->mu);
	note(n, pod, bytes, len, false);
	pthread_mutex_unlock(&n->mu);
}

void nudge_retry(struct nudge *n, const struct api_pod_ref *pod)
{
	if (!pod_ok(n, pod))
		return;
	pthread_mutex_lock(&n->mu);
	struct waiter *w = note(n, pod, NULL, 0, true);
	int64_t due = w ? w->seen_ms + retry_wait(n, w) : 0;
	if (w && (!n->retry_due_ms || due < n->retry_due_ms))
		n->retry_due_ms = due;
	pthread_cond_signal(&n->wake);
	pthread_mutex_unlock(&n->mu);
}

/* Under mu: when the next gang member not nudged since its rejection is due; 0: none waits. */
static int64_t next_retry_due(struct nudge *n)
{
	int64_t due = 0;
	const char *k;
	void *v;
	for (size_t pos = 0; strmap_next(&n->waiters, &pos, &k, &v);) {
		const struct waiter *w = v;
		int64_t at = w->seen_ms + retry_wait(n, w);
		if (w->retry && !(w->nudged_ms && w->nudged_ms >= w->seen_ms) && (!due || at < due))
			due = at;
	}
	return due;
}

void nudge_forget(struct nudge *n, const char *uid)
{
	if (!n || !uid || atomic_load_explicit(&n->nwaiting, memory_order_relaxed) == 0)
		return;
	pthread_mutex_lock(&n->mu);
	struct waiter *w = strmap_get(&n->waiters, uid);
	if (w)
		drop(n, w);
	pthread_mutex_unlock(&n->mu);
}

void nudge_gained(void *ctx, const char *node)
{
	struct nudge *n = ctx;
	if (!n || atomic_load_explicit(&n->nwaiting, memory_order_relaxed) == 0)
		return;   /* nothing waits: nothing to look at (a pod rejected later is rejected on this state) */
	pthread_mutex_lock(&n->mu);
	bool noted = n->all;
	for (int i = 0; i < n->ngained && !noted; i++)
		noted = !strcmp(n->gained[i], node);
	if (!noted) {
		if (!n->ngained && !n->all)
			n->gained_wall_ms = wall_ms();
		char *copy = n->ngained < GAINED_MAX ? strdup(node) : NULL;
		if (copy)
			n->gained[n->ngained++] = copy;
		else
			n->all = true;
		pthread_cond_signal(&n->wake);
	}
	pthread_mutex_unlock(&n->mu);
}

/* ---- the thread ---------------------------------------------------------- */

/* Under mu: forgets pods not rejected within keep_s. */
static void sweep(struct nudge *n, int64_t now)
{
	const char *k;
	void *v;
	for (size_t pos = 0; strmap_next(&n->waiters, &pos, &k, &v);) {
		struct waiter *w = v;
		if (now - w->seen_ms > (int64_t)n->o.keep_s * 1000)
			drop(n, w);
	}
	n->swept_ms = now;
}

static int64_t sweep_every(const struct nudge *n)
{
	return (int64_t)n->o.keep_s * 1000 < SWEEP_MS ? (int64_t)n->o.keep_s * 1000 : SWEEP_MS;
}

static int by_age(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;
	return (a->since > b->since) - (a->since < b->since);
}

/*
 * The waiting pods not nudged since filter last rejected them, oldest
 * first, into *out; how many (-1: no memory). (A pod nudged is tried by
 * kube-scheduler again: once more only after that try failed too.)
 */
static int candidates(struct nudge *n, int64_t now, struct cand **out)
{
	pthread_mutex_lock(&n->mu);
	if (now - n->swept_ms >= sweep_every(n))
		sweep(n, now);
	struct cand *c = calloc(n->waiters.len + 1, sizeof(*c));
	int nc = 0;
	const char *k;
	void *v;
	for (size_t pos = 0; c && strmap_next(&n->waiters, &pos, &k, &v);) {
		struct waiter *w = v;
		if (w->nudged_ms && w->nudged_ms >= w->seen_ms)
			continue;
		if (w->retry && now - w->seen_ms < retry_wait(n, w))
			continue;   /* kube-scheduler may try it again meanwhile: a nudge during a try fails its binding */
		if (!w->retry && claim_unpack(w->claim, &c[nc].claim))
			continue;
		c[nc].retry = w->retry;
		memcpy(c[nc].uid, w->uid, sizeof(w->uid));
		memcpy(c[nc].ns, w->ns, sizeof(w->ns));
		memcpy(c[nc].name, w->name, sizeof(w->name));
		c[nc++].since = w->since;
	}
	pthread_mutex_unlock(&n->mu);
	if (!c)
		return -1;
	qsort(c, (size_t)nc, sizeof(*c), by_age);
	*out = c;
	return nc;
}

/* Whether some device of n could take a pod: usable, not held whole, with memory and compute left. */
static bool has_room(const struct gpu_node *n)
{
	for (int i = 0; i < n->ndev; i++)
		if (gpu_usable(&n->dev[i]) && !n->dev[i].exclusive && gpu_free_mib(&n->dev[i]) &&
		    gpu_free_core(&n->dev[i]))
			return true;
	return false;
}

/*
 * Marks the candidates still without a node that fit on v, each counted
 * against the ones before; *budget less the fits tried.
 */
static void place_on(const struct cache_node *v, struct cand *c, int nc, long *budget)
{
	if (!v || !v->has_gns || *budget <= 0 || !has_room(v->node))
		return;
	const struct claim **left = malloc(((size_t)nc + 1) * sizeof(*left));
	int *at = malloc(((size_t)nc + 1) * sizeof(*at));
	bool *fits = malloc(((size_t)nc + 1) * sizeof(*fits));
	int nl = 0;
	for (int i = 0; left && at && fits && i < nc; i++)
		if (!c[i].node)
			at[nl] = i, left[nl++] = &c[i].claim;
	*budget -= nl;
	if (nl && nudge_fits(v->node, left, nl, fits) > 0)
		for (int i = 0; i < nl; i++)
			if (fits[i])
				c[at[i]].node = v->node->name;
	free(left), free(at), free(fits);
}

/*
 * Which candidates fit on the nodes noted (every node: all), within
 * FIT_BUDGET fits: thousands of pods that fit nowhere, on tens of
 * thousands of nodes, would take minutes of CPU.
 */
static void place(struct snapshot *s, char **gained, int ng, bool all, struct cand *c, int nc)
{
	long budget = FIT_BUDGET;
	size_t nodes = all ? s->n : (size_t)ng;
	for (size_t i = 0; i < nodes && budget > 0; i++)
		place_on(all ? snapshot_node(s, i) : snapshot_find(s, gained[i]), c, nc, &budget);
	if (budget <= 0)
		log_warn("nudges: too many waiting pods and freed nodes to look at all; some wait for kube-scheduler",
			 "waiting=%d nodes=%zu", nc, nodes);
}

/* A wall-clock time in milliseconds as RFC 3339: 2026-11-29T01:02:03.456Z. */
static void timestamp_ms(int64_t ms, char *out, size_t size)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	size_t l = strftime(out, size, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + l, size - l, ".%03dZ", (int)(ms % 1000));
}

/* One PATCH of the pod's annotation: its result. */
static enum nudge_result send_one(struct nudge *n, const struct cand *c, char *err, size_t errlen)
{
	struct buf path, body;
	buf_init(&path, 4096);
	buf_init(&body, 4096);
	buf_adds(&path, "/api/v1/namespaces/");
	kube_escape(&path, c->ns);
	buf_adds(&path, "/pods/");
	kube_escape(&path, c->name);
	char ts[40];
	timestamp_ms(wall_ms(), ts, sizeof(ts));
	/* The uid: a pod of the same name made since is not this one (the API server refuses the change). */
	buf_adds(&body, "{\"metadata\":{\"uid\":");
	buf_add_json_str(&body, c->uid);
	buf_printf(&body, ",\"annotations\":{\"" ANN_NUDGED "\":\"%s\"}}}", ts);
	struct kube_response r;
	kube_response_init(&r);
	enum nudge_result res = NUDGE_FAILED;
	if (!kube_request(n->o.kube, "PATCH", buf_cstr(&path), buf_cstr(&body), "application/merge-patch+json",
			  n->o.timeout_s, &r, err, errlen)) {
		char m[200];
		if (r.status < 300)
			res = NUDGE_SENT;
		else
			res = r.status == 404 || r.status == 409 || r.status == 422 ? NUDGE_GONE : NUDGE_FAILED;
		if (r.status >= 300)
			snprintf(err, errlen, "HTTP %ld: %s", r.status, kube_status_message(&r, m, sizeof(m)));
	}
	kube_response_release(&r);
	buf_release(&path);
	buf_release(&body);
	return res;
}

/* After a nudge: when it was, or the pod forgotten (gone). */
static void record(struct nudge *n, const struct cand *c, enum nudge_result res, int64_t now)
{
	atomic_fetch_add(&n->counts[res], 1);
	pthread_mutex_lock(&n->mu);
	struct waiter *w = strmap_get(&n->waiters, c->uid);
	if (w && res == NUDGE_GONE)
		drop(n, w);
	else if (w && res == NUDGE_SENT)
		w->nudged_ms = now;
	pthread_mutex_unlock(&n->mu);
}

/*
 * Nudges the candidates that fit somewhere, as the bucket allows. Returns
 * how many were held back by it (they are tried again after a pause).
 */
static int nudge_fitting(struct nudge *n, struct cand *c, int nc, int64_t gained_wall_ms)
{
	int limited = 0;
	for (int i = 0; i < nc; i++) {
		if (!c[i].node)
			continue;
		int64_t now = clock_mono_ms();
		if (!nudge_bucket_take(&n->bucket, now)) {
			limited++;
			atomic_fetch_add(&n->counts[NUDGE_LIMITED], 1);
			continue;
		}
		char err[300] = "";
		enum nudge_result res = send_one(n, &c[i], err, sizeof(err));
		record(n, &c[i], res, now);
		if (res == NUDGE_SENT)
			log_info("nudged a waiting pod", "pod=%s/%s node=%s ms_since_freed=%lld", c[i].ns, c[i].name,
				 c[i].node, (long long)(wall_ms() - gained_wall_ms));
		else if (res == NUDGE_FAILED)
			log_warn("cannot nudge a waiting pod", "pod=%s/%s error=\"%s\"", c[i].ns, c[i].name, LOG_Q(err));
	}
	return limited;
}

/* One pass over the nodes noted. Returns how many pods the bucket held back. */
static int pass(struct nudge *n, char **gained, int ng, bool all, int64_t gained_wall_ms)
{
	struct cand *c = NULL;
	int nc = candidates(n, clock_mono_ms(), &c);
	int limited = 0;
	if (nc > 0) {
		struct snapshot *s = cache_acquire(n->o.cache);
		place(s, gained, ng, all, c, nc);
		int fit = 0;
		for (int i = 0; i < nc; i++) {
			if (c[i].retry)
				c[i].node = "its gang's places";   /* nothing to fit: the next try names other nodes */
			fit += c[i].node != NULL;
		}
		if (fit && (ng || all)) {
			char at[40];
			timestamp_ms(gained_wall_ms, at, sizeof(at));
			log_info("GPUs freed: nudging the waiting pods that fit now",
				 "freed_at=%s nodes=%d first=%s waiting=%d fit=%d", at, all ? (int)s->n : ng,
				 ng ? gained[0] : "", nc, fit);
		}
		if (fit)
			limited = nudge_fitting(n, c, nc, gained_wall_ms);
		snapshot_release(s);   /* (the candidates' node names are the snapshot's) */
	}
	for (int i = 0; i < nc; i++)
		claim_release(&c[i].claim);
	free(c);
	return limited;
}

static void *run(void *arg)
{
	struct nudge *n = arg;
	pthread_mutex_lock(&n->mu);
	while (!n->stop) {
		int64_t now = clock_mono_ms();
		bool retry_due = n->retry_due_ms && now >= n->retry_due_ms;
		if (!n->ngained && !n->all && !retry_due) {
			n->busy = false;
			pthread_cond_broadcast(&n->idle);
			int64_t wait = n->retry_due_ms && n->retry_due_ms - now < SWEEP_MS ? n->retry_due_ms - now : SWEEP_MS;
			struct timespec until = clock_deadline_ms(wait);
			pthread_cond_timedwait(&n->wake, &n->mu, &until);
			if (!n->ngained && !n->all && !n->stop && clock_mono_ms() - n->swept_ms >= sweep_every(n))
				sweep(n, clock_mono_ms());
			continue;
		}
		char *gained[GAINED_MAX];
		int ng = n->ngained;
		bool all = n->all;
		int64_t wall = n->ngained || n->all ? n->gained_wall_ms : wall_ms();
		memcpy(gained, n->gained, (size_t)ng * sizeof(*gained));
		n->ngained = 0;
		n->all = false;
		n->busy = true;
		pthread_mutex_unlock(&n->mu);
		int limited = pass(n, gained, ng, all, wall);
		pthread_mutex_lock(&n->mu);
		n->retry_due_ms = next_retry_due(n);   /* those not due yet, rejected again, or held by the bucket */
		if (limited && !n->stop) {
			/* Tried again once the bucket has a token: the nodes noted once more. */
			for (int i = 0; i < ng && n->ngained < GAINED_MAX; i++)
				n->gained[n->ngained++] = gained[i], gained[i] = NULL;
			n->all = n->all || all;
			struct timespec until = clock_deadline_ms(1000 / (n->o.rate > 0 ? n->o.rate : 1) + 1);
			pthread_cond_timedwait(&n->wake, &n->mu, &until);
		}
		for (int i = 0; i < ng; i++)
			free(gained[i]);
	}
	n->busy = false;
	pthread_cond_broadcast(&n->idle);
	pthread_mutex_unlock(&n->mu);
	return NULL;
}

/* ---- life ---------------------------------------------------------------- */

struct nudge *nudge_new(const struct nudge_opts *o)
{
	struct nudge *n = calloc(1, sizeof(*n));
	if (!n || !o->cache || !o->kube) {
		free(n);
		return NULL;
	}
	n->o = *o;
	n->o.rate = o->rate > 0 ? o->rate : 20;
	n->o.keep = o->keep > 0 ? o->keep : 4096;
	n->o.keep_s = o->keep_s > 0 ? o->keep_s : 900;
	n->o.timeout_s = o->timeout_s > 0 ? o->timeout_s : 10;
	n->o.retry_delay_ms = o->retry_delay_ms > 0 ? o->retry_delay_ms : 1500;
	pthread_mutex_init(&n->mu, NULL);
	pthread_cond_init(&n->wake, NULL);
	pthread_cond_init(&n->idle, NULL);
	strmap_init(&n->waiters);
	n->swept_ms = clock_mono_ms();
	nudge_bucket_init(&n->bucket, n->o.rate, n->o.rate, n->swept_ms);
	if (pthread_create(&n->thread, NULL, run, n)) {
		strmap_release(&n->waiters);
		free(n);
		return NULL;
	}
	return n;
}

void nudge_free(struct nudge *n)
{
	if (!n)
		return;
	pthread_mutex_lock(&n->mu);
	n->stop = true;
	pthread_cond_signal(&n->wake);
	pthread_mutex_unlock(&n->mu);
	pthread_join(n->thread, NULL);
	const char *k;
	void *v;
	for (size_t pos = 0; strmap_next(&n->waiters, &pos, &k, &v);)
		waiter_free(v);
	strmap_release(&n->waiters);
	for (int i = 0; i < n->ngained; i++)
		free(n->gained[i]);
	pthread_mutex_destroy(&n->mu);
	pthread_cond_destroy(&n->wake);
	pthread_cond_destroy(&n->idle);
	free(n);
}

void nudge_counts(struct nudge *n, uint64_t *out)
{
	for (int i = 0; i < NUDGE_NRESULT; i++)
		out[i] = n ? atomic_load(&n->counts[i]) : 0;
}

int nudge_waiting_count(struct nudge *n)
{
	return n ? atomic_load(&n->nwaiting) : 0;
}

bool nudge_idle(struct nudge *n, int timeout_ms)
{
	if (!n)
		return true;
	struct timespec until = clock_deadline_ms(timeout_ms);
	pthread_mutex_lock(&n->mu);
	int rc = 0;
	while (rc == 0 && (n->busy || n->ngained || n->all || n->retry_due_ms))
		rc = pthread_cond_timedwait(&n->idle, &n->mu, &until);
	bool idle = !n->busy && !n->ngained && !n->all && !n->retry_due_ms;
	pthread_mutex_unlock(&n->mu);
	return idle;
}
