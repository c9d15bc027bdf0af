/*
 * One thread at a time: every piece of replica work runs on its own thread,
 * and a baton says which thread (or the simulator) runs. A thread gives the
 * baton back at each request to the API server (the kube client's
 * transport), and at each sleep or condition wait (the clock's yield hook);
 * the simulator gives it to the thread it chose. Replica code never blocks
 * on a lock a parked thread holds: a thread parks only in kube_request,
 * which the reservation module calls with none of its locks held, and in
 * clock_cond_wait, which lets its mutex go first. A thread that blocks
 * anywhere else stops the run with a message (the watchdog below).
 */
#include "dst.h"
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t baton_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t baton_cond = PTHREAD_COND_INITIALIZER;
static struct task *running;          /* NULL: the simulator */
static _Thread_local struct task *self;

/* On a task's thread: hands the baton back and waits until the simulator gives it again. */
static void park(struct task *t)
{
	pthread_mutex_lock(&baton_lock);
	running = NULL;
	pthread_cond_broadcast(&baton_cond);
	while (running != t)
		pthread_cond_wait(&baton_cond, &baton_lock);
	pthread_mutex_unlock(&baton_lock);
}

static void yield_hook(void *ctx)
{
	(void)ctx;
	struct task *t = self;
	if (!t)
		return;        /* the simulator's own thread never waits */
	t->st = T_YIELD;
	park(t);
	t->st = T_RUN;
}

void sched_init(void)
{
	clock_virtual_hook(yield_hook, NULL);
}

static void *task_main(void *arg)
{
	struct task *t = arg;
	pthread_mutex_lock(&baton_lock);
	while (running != t)
		pthread_cond_wait(&baton_cond, &baton_lock);
	pthread_mutex_unlock(&baton_lock);
	self = t;
	t->st = T_RUN;
	t->fn(t);
	pthread_mutex_lock(&baton_lock);
	t->st = T_DONE;
	running = NULL;
	pthread_cond_broadcast(&baton_cond);
	pthread_mutex_unlock(&baton_lock);
	return NULL;
}

void sched_clock(struct world *w, int slot)
{
	int64_t wall = w->wall0_s + w->now_ms / 1000 + (slot >= 0 ? w->skew_s[slot] : 0);
	clock_virtual_set(w->now_ms * 1000000 + 1000000000, wall);
}

/* The simulator's side: t runs until it parks or ends. */
static void run(struct world *w, struct task *t)
{
	sched_clock(w, t->inc->slot);
	pthread_mutex_lock(&baton_lock);
	running = t;
	pthread_cond_broadcast(&baton_cond);
	while (running) {
		struct timespec until = clock_deadline_ms(20000);
		if (pthread_cond_timedwait(&baton_cond, &baton_lock, &until) == ETIMEDOUT && running) {
			fprintf(stderr, "dst: seed %llu: thread %d (%s) blocked outside a yield point; stopping\n",
				(unsigned long long)w->seed, t->id, t->what);
			abort();
		}
	}
	pthread_mutex_unlock(&baton_lock);
}

struct task *sched_spawn(struct world *w, struct incarnation *inc, void (*fn)(struct task *), const char *what)
{
	struct task *t = calloc(1, sizeof(*t));
	t->id = ++w->task_ids;
	t->inc = inc;
	t->fn = fn;
	t->pod = -1;
	t->st = T_NEW;
	snprintf(t->what, sizeof(t->what), "%s", what);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, (size_t)4 << 20);
	if (pthread_create(&t->th, &attr, task_main, t)) {
		fprintf(stderr, "dst: cannot start a thread\n");
		abort();
	}
	pthread_attr_destroy(&attr);
	inc->tasks++;
	t->faults0 = inc->faults;
	t->next = w->tasks;
	w->tasks = t;
	w->ntasks++;
	return t;
}

bool sched_resume(struct world *w, struct task *t)
{
	t->resumes++;
	run(w, t);
	if (t->st != T_DONE)
		return false;
	pthread_join(t->th, NULL);
	for (struct task **pp = &w->tasks; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	w->ntasks--;
	t->inc->tasks--;
	dst_task_done(w, t);
	free(t);
	return true;
}

void sched_answer(struct world *w, struct task *t, bool apply, long status, const char *err)
{
	struct kube_response scratch;
	kube_response_init(&scratch);
	struct kube_response *r = t->resp;
	if (apply)
		apis_handle(w->api, t->method, t->path, t->rbody, status ? r : &scratch);
	kube_response_release(&scratch);
	if (status > 1) {
		/* an error of the server's own (429, 500): a Status body */
		buf_clear(&r->body);
		buf_printf(&r->body, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"%s\","
			   "\"code\":%ld}", err ? err : "", status);
		r->status = status;
		if (status == 429)
			r->retry_after = 1;
	}
	t->rc = status ? 0 : -1;
	/* (a 429 on the binding is a clean refusal: the bind releases what it reserved) */
	if (!apply || status != 1)
		if (!(status == 429 && strstr(t->path, "/binding"))) {
			t->faulted = true;
			t->inc->faults++;
		}
	if (!status)
		snprintf(t->err, t->errlen, "%s %s: %s", t->method, t->path, err ? err : "no answer");
}

int sched_transport(void *ctx, const char *method, const char *path, const char *body, const char *content_type,
		    long timeout_s, struct kube_response *r, char *err, size_t errlen)
{
	(void)content_type;
	struct incarnation *inc = ctx;
	struct world *w = inc->w;
	struct task *t = self;
	if (!t) {
		/* the simulator's thread (a filter): answered at once */
		apis_handle(w->api, method, path, body, r);
		return 0;
	}
	if (inc->dead || w->api_down_until_ms > w->now_ms) {
		t->faulted = true;
		inc->faults++;
		snprintf(err, errlen, "%s %s: Couldn't connect to server", method, path);
		return -1;
	}
	t->method = method;
	t->path = path;
	t->rbody = body;
	t->timeout_s = timeout_s > 0 ? timeout_s : 30;
	t->sent_ms = w->now_ms;
	/* An API server that holds a request until its client gives up (then applies it or not, or,
	 * a write, later). */
	t->stuck = w->faults_on && (w->fault[F_SLOW] || (w->fault[F_LATE] && strcmp(method, "GET"))) &&
		   rng_pct(&w->g, 10);
	if (t->stuck)
		dst_trace(w, "[%s] %s %.90s: held until its timeout", t->what, method, path);
	t->resp = r;
	t->err = err;
	t->errlen = errlen;
	t->st = T_REQ;
	park(t);
	t->st = T_RUN;
	return t->rc;
}
