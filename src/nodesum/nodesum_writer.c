/*
 * The writer of the nodes' counts (nodesum.h): a thread that runs a pass
 * every interval and patches the nodes it finds due, one request at a time.
 * The watch's hook and the pass share the table under one mutex; the
 * requests are made without it.
 */
#include "nodesum.h"
#include "clock.h"
#include "log.h"
#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WRITES_A_PASS 10000

struct nodesum_writer {
	struct nodesum_opts o;
	char identity[128];
	pthread_mutex_t mu;        /* guards t, stop, pending */
	pthread_cond_t wake;
	struct nodesum_table *t;
	bool stop, joined;
	bool started;              /* the thread runs (set before it does, by the starting thread) */
	int pending;
	int max;                   /* writes a pass */
	struct nodesum_due *due;   /* max of them */
	pthread_t thread;
};

/* PATCHes one node's status.allocation; the result as the metric's label (NSUM_*), why it failed in err. */
static int write_one(struct nodesum_writer *w, const struct nodesum_due *d, char *err, size_t errlen)
{
	struct buf path, body;
	buf_init(&path, 1024);
	buf_init(&body, 4096);
	struct kube_response r;
	kube_response_init(&r);
	char ts[32];
	clock_wall_rfc3339(ts, sizeof(ts));
	int result = NSUM_FAILED;
	if (buf_adds(&path, "/apis/gpu.scheduling/v1/gpunodestatuses/") || kube_escape(&path, d->object) ||
	    nodesum_patch(&d->sum, ts, w->identity, &body)) {
		snprintf(err, errlen, "out of memory");
	} else if (kube_request(w->o.client, "PATCH", buf_cstr(&path), buf_cstr(&body), "application/merge-patch+json",
				15, &r, err, errlen)) {
		/* err says why */
	} else if (r.status == 200) {
		result = NSUM_WRITTEN;
	} else if (r.status == 404) {
		result = NSUM_GONE;
	} else {
		char msg[300];
		kube_status_message(&r, msg, sizeof(msg));
		snprintf(err, errlen, "HTTP %ld: %s", r.status, msg);
	}
	kube_response_release(&r);
	buf_release(&body);
	buf_release(&path);
	return result;
}

/* One pass: the due nodes found under the lock, written without it. */
static void pass(struct nodesum_writer *w)
{
	char why[300];
	if (w->o.ready && !w->o.ready(w->o.ready_ctx, why, sizeof(why)))
		return;   /* the counts would be of a cache still filling */
	struct snapshot *snap = cache_acquire(w->o.cache);
	if (!snap)
		return;
	pthread_mutex_lock(&w->mu);
	int pending = 0;
	int n = nodesum_table_scan(w->t, snap, w->due, w->max, &pending);
	w->pending = pending;
	pthread_mutex_unlock(&w->mu);
	snapshot_release(snap);
	int failed = 0;
	char err[300] = "", node[254] = "";
	for (int i = 0; i < n; i++) {
		int result = write_one(w, &w->due[i], err, sizeof(err));
		metrics_inc(M_NODE_SUMMARY_WRITES, result);
		if (result == NSUM_FAILED && !failed++)
			snprintf(node, sizeof(node), "%s", w->due[i].object);
		pthread_mutex_lock(&w->mu);
		nodesum_table_done(w->t, &w->due[i], result == NSUM_WRITTEN);
		if (result == NSUM_FAILED)
			w->pending++;
		bool stop = w->stop;
		pthread_mutex_unlock(&w->mu);
		if (stop)
			break;
	}
	/* one line a pass, not one a node: they are tried again at the next */
	if (failed)
		log_warn("cannot write the GPU counts of GpuNodeStatuses; trying again next period", "failed=%d first=%s error=\"%s\"",
			 failed, node, LOG_Q(err));
}

static void *run(void *arg)
{
	struct nodesum_writer *w = arg;
	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		struct timespec until = clock_deadline_ms((int64_t)w->o.interval_s * 1000);
		int rc = 0;
		while (!w->stop && rc == 0)
			rc = pthread_cond_timedwait(&w->wake, &w->mu, &until);
		if (w->stop)
			break;
		pthread_mutex_unlock(&w->mu);
		pass(w);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

struct nodesum_writer *nodesum_writer_new(const struct nodesum_opts *o)
{
	struct nodesum_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->o = *o;
	if (w->o.interval_s < 1)
		w->o.interval_s = 1;
	snprintf(w->identity, sizeof(w->identity), "%s", o->identity ? o->identity : "");
	long long max = (long long)w->o.interval_s * (o->writes_per_s > 0 ? o->writes_per_s : 1);
	w->max = max > MAX_WRITES_A_PASS ? MAX_WRITES_A_PASS : (int)max;
	w->due = calloc((size_t)w->max, sizeof(*w->due));
	w->t = nodesum_table_new();
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->wake, NULL);
	if (!w->due || !w->t) {
		nodesum_writer_free(w);
		return NULL;
	}
	return w;
}

int nodesum_writer_start(struct nodesum_writer *w)
{
	if (pthread_create(&w->thread, NULL, run, w))
		return -1;
	w->started = true;
	return 0;
}

void nodesum_writer_stop(struct nodesum_writer *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	bool joined = w->joined;
	w->stop = true;
	w->joined = true;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->mu);
	if (!joined && w->started)
		pthread_join(w->thread, NULL);
}

void nodesum_writer_free(struct nodesum_writer *w)
{
	if (!w)
		return;
	nodesum_writer_stop(w);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->mu);
	nodesum_table_free(w->t);
	free(w->due);
	free(w);
}

void nodesum_writer_seen(void *ctx, const char *node, const cJSON *obj)
{
	struct nodesum_writer *w = ctx;
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	if (nodesum_table_seen(w->t, node, obj))
		log_warn("cannot keep a node's GPU counts", "node=%s error=\"out of memory\"", node);
	pthread_mutex_unlock(&w->mu);
}

int nodesum_writer_pending(struct nodesum_writer *w)
{
	if (!w)
		return 0;
	pthread_mutex_lock(&w->mu);
	int n = w->pending;
	pthread_mutex_unlock(&w->mu);
	return n;
}
