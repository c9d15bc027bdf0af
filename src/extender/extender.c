/* The extender: lifecycle, readiness, and the learned workload its verbs read. */
#include "extender_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- the learned workload ------------------------------------------------ */

void extender_wl_release(struct wl_copy *w)
{
	if (w && atomic_fetch_sub(&w->refs, 1) == 1)
		free(w);
}

struct wl_copy *extender_wl_acquire(struct extender *x)
{
	pthread_mutex_lock(&x->wl_lock);
	struct wl_copy *w = x->wl_current;
	if (w)
		atomic_fetch_add(&w->refs, 1);
	pthread_mutex_unlock(&x->wl_lock);
	return w;
}

/* Makes a copy of the master mix the current one; returns the replaced copy. Under wl_lock. */
static struct wl_copy *wl_publish(struct extender *x)
{
	struct wl_copy *w = malloc(sizeof(*w));
	if (!w)
		return NULL;
	atomic_init(&w->refs, 1);
	memcpy(&w->wl, &x->wl_master, sizeof(w->wl));
	struct wl_copy *old = x->wl_current;
	x->wl_current = w;
	return old;
}

void extender_wl_observe(struct extender *x, const struct claim *c)
{
	pthread_mutex_lock(&x->wl_lock);
	uint32_t before = x->wl_master.version;
	workload_observe(&x->wl_master, c);
	struct wl_copy *old = NULL;
	if (x->wl_master.version != before || !x->wl_current)
		old = wl_publish(x);
	pthread_mutex_unlock(&x->wl_lock);
	extender_wl_release(old);
}

/* ---- lifecycle ----------------------------------------------------------- */

struct extender *extender_new(const struct extender_opts *opts)
{
	struct extender *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->o = *opts;
	x->res = *opts->res;
	x->o.res = &x->res;
	if (pending_init(&x->pending, PENDING_CAP)) {
		free(x);
		return NULL;
	}
	x->assume_choices = opts->assume_binds && opts->filter_keeps_best == 1;
	if (x->assume_choices && choices_init(&x->choices, CHOICES_CAP)) {
		pending_release(&x->pending);
		free(x);
		return NULL;
	}
	pthread_mutex_init(&x->wl_lock, NULL);
	ratings_init(&x->ratings);
	backlog_init(&x->backlog);
	workload_init(&x->wl_master, true);
	wl_publish(x);   /* none yet: replaces nothing */
	return x;
}

void extender_free(struct extender *x)
{
	if (!x)
		return;
	pending_release(&x->pending);
	choices_release(&x->choices);
	extender_wl_release(x->wl_current);
	pthread_mutex_destroy(&x->wl_lock);
	ratings_release(&x->ratings);
	backlog_destroy(&x->backlog);
	free(x);
}

bool extender_not_ready(struct extender *x, struct http_response *resp, int status)
{
	char why[300];
	if (!x->o.ready || x->o.ready(x->o.ready_ctx, why, sizeof(why)))
		return false;
	httpd_error(resp, status, "extender not ready: %s", why);
	return true;
}
