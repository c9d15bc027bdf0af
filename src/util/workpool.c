#include "workpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct workpool {
	pthread_mutex_t lock;
	pthread_cond_t work;        /* a new job for the helpers */
	pthread_cond_t done;        /* a helper finished its part */
	pthread_t threads[WORKPOOL_MAX_PARTS];
	int nthreads;
	bool busy;                  /* a run is in progress */
	bool stop;
	unsigned long generation;   /* bumped per job, so a helper runs each job once */
	/* The current job. */
	workpool_fn fn;
	void *ctx;
	size_t n;
	int parts;
	int pending;                /* parts not yet finished by helpers */
};

static void range(size_t n, int parts, int part, size_t *begin, size_t *end)
{
	*begin = n * (size_t)part / (size_t)parts;
	*end = n * (size_t)(part + 1) / (size_t)parts;
}

struct helper_arg {
	struct workpool *p;
	int index;                  /* this helper does part index+1 */
};

static void *helper(void *arg)
{
	struct helper_arg *h = arg;
	struct workpool *p = h->p;
	int part = h->index + 1;
	free(h);
	unsigned long seen = 0;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->generation == seen)
			pthread_cond_wait(&p->work, &p->lock);
		if (p->stop)
			break;
		seen = p->generation;
		if (part >= p->parts)
			continue;   /* this job has fewer parts than helpers */
		workpool_fn fn = p->fn;
		void *ctx = p->ctx;
		size_t b, e;
		range(p->n, p->parts, part, &b, &e);
		pthread_mutex_unlock(&p->lock);
		fn(ctx, b, e, part);
		pthread_mutex_lock(&p->lock);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct workpool *workpool_new(int helpers)
{
	struct workpool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	if (helpers > WORKPOOL_MAX_PARTS - 1)
		helpers = WORKPOOL_MAX_PARTS - 1;
	for (int i = 0; i < helpers; i++) {
		struct helper_arg *h = malloc(sizeof(*h));
		if (!h)
			break;
		*h = (struct helper_arg){ p, i };
		if (pthread_create(&p->threads[i], NULL, helper, h)) {
			free(h);
			break;
		}
		p->nthreads++;
	}
	return p;
}

void workpool_free(struct workpool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	free(p);
}

int workpool_run(struct workpool *p, size_t n, size_t min_part, workpool_fn fn, void *ctx)
{
	int parts = p ? p->nthreads + 1 : 1;
	if (min_part && n / min_part < (size_t)parts)
		parts = (int)(n / min_part);
	if (parts <= 1 || !p) {
		fn(ctx, 0, n, 0);
		return 1;
	}
	pthread_mutex_lock(&p->lock);
	if (p->busy) {
		/* Another request has the helpers: do it all here rather than wait. */
		pthread_mutex_unlock(&p->lock);
		fn(ctx, 0, n, 0);
		return 1;
	}
	p->busy = true;
	p->fn = fn;
	p->ctx = ctx;
	p->n = n;
	p->parts = parts;
	p->pending = parts - 1;
	p->generation++;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);

	size_t b, e;
	range(n, parts, 0, &b, &e);
	fn(ctx, b, e, 0);

	pthread_mutex_lock(&p->lock);
	while (p->pending > 0)
		pthread_cond_wait(&p->done, &p->lock);
	p->busy = false;
	pthread_mutex_unlock(&p->lock);
	return parts;
}
