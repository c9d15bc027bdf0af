#include "workload.h"

#include <stdlib.h>
#include <string.h>

/*
 * The prior: what a GPU cluster typically runs when we know nothing yet.
 * Mostly single whole GPUs and fractional shares, some multi-GPU jobs and
 * some CPU-only pods, a few cores and 4 GiB of host memory per quarter GPU.
 * p is the share of tasks (sums to 1); the prior weighs WL_PRIOR_WEIGHT
 * tasks in the histogram.
 */
#define PRIOR(cpu, mem, milli, count, p) { { cpu, mem, milli, count, -1, 0, 0 }, p }
static const struct wl_pop prior[] = {
	PRIOR(8000, 32768, 1000, 1, 0.30),
	PRIOR(4000, 16384, 500, 1, 0.15),
	PRIOR(2000, 8192, 250, 1, 0.10),
	PRIOR(6000, 24576, 750, 1, 0.10),
	PRIOR(16000, 65536, 1000, 2, 0.04),
	PRIOR(32000, 131072, 1000, 4, 0.03),
	PRIOR(64000, 262144, 1000, 8, 0.03),
	PRIOR(4000, 16384, 0, 0, 0.15),
	PRIOR(16000, 65536, 0, 0, 0.10),
};
#define NPRIOR ((int)(sizeof(prior) / sizeof(prior[0])))

const struct wl_pop *workload_snapshot(const struct workload *wl, int *n)
{
	if (!wl) {
		*n = NPRIOR;
		return prior;
	}
	*n = wl->npop;
	return wl->pop;
}

static void host_per_gpu(const struct wl_pop *pop, int n, double *cpu, double *mem)
{
	double c = 0, m = 0, g = 0;
	for (int i = 0; i < n; i++) {
		c += pop[i].p * (double)pop[i].s.cpu_milli;
		m += pop[i].p * (double)pop[i].s.mem_mib;
		g += pop[i].p * (double)pop[i].s.gpu_milli * pop[i].s.count / GPU_CORE_FULL;
	}
	*cpu = g > 0 ? c / g : 0;
	*mem = g > 0 ? m / g : 0;
}

static int spec_find(const struct workload *wl, const char *models)
{
	if (!models[0])
		return -1;
	for (int i = 0; i < wl->nspecs; i++)
		if (!strcmp(wl->specs[i], models))
			return i;
	return -2;
}

static int spec_intern(struct workload *wl, const char *models)
{
	int i = spec_find(wl, models);
	if (i != -2)
		return i;
	if (wl->nspecs >= WL_MAX_SPECS)
		return -2;
	size_t len = strlen(models);
	if (len >= WL_SPEC_LEN)
		return -2;
	memcpy(wl->specs[wl->nspecs], models, len + 1);
	return wl->nspecs++;
}

const char *workload_spec(const struct workload *wl, int spec)
{
	return spec >= 0 && spec < wl->nspecs ? wl->specs[spec] : "";
}

void workload_shape_of(const struct workload *wl, const struct claim *c, struct wl_shape *s)
{
	memset(s, 0, sizeof(*s));
	s->cpu_milli = c->cpu_milli;
	s->mem_mib = c->mem_mib_host;
	s->spec = -1;
	if (claim_wants_gpu(c) && c->mode != CLAIM_MIG) {
		s->count = c->count;
		if (c->mode == CLAIM_SHARED)
			s->gpu_milli = c->core ? (c->core > GPU_CORE_FULL ? GPU_CORE_FULL : c->core) : 1;
		else
			s->gpu_milli = GPU_CORE_FULL;
		s->spec = spec_find(wl, c->models);
	}
}

static bool same_shape(const struct wl_shape *a, const struct wl_shape *b)
{
	return a->cpu_milli == b->cpu_milli && a->gpu_milli == b->gpu_milli &&
	       a->count == b->count && a->spec == b->spec;
}

/* Adds weight w of shape s (s->spec already interned). */
static void add_shape(struct workload *wl, const struct wl_shape *s, double w)
{
	int at = -1;
	for (int i = 0; i < wl->nshapes; i++) {
		if (same_shape(&wl->shapes[i], s)) {
			at = i;
			break;
		}
	}
	if (at < 0) {
		if (wl->nshapes < WL_MAX_SHAPES) {
			at = wl->nshapes++;
		} else {
			/* Full: the lightest shape makes room. */
			at = 0;
			for (int i = 1; i < wl->nshapes; i++)
				if (wl->shapes[i].weight < wl->shapes[at].weight)
					at = i;
			wl->total -= wl->shapes[at].weight;
		}
		wl->shapes[at] = *s;
		wl->shapes[at].weight = 0;
		wl->shapes[at].mem_weighted = 0;
	}
	struct wl_shape *h = &wl->shapes[at];
	h->weight += w;
	h->mem_weighted += w * (double)s->mem_mib;
	h->mem_mib = (int64_t)(h->mem_weighted / h->weight + 0.5);
	wl->total += w;
	wl->since_rebuild += w;
}

static int by_weight_desc(const void *pa, const void *pb)
{
	const struct wl_shape *a = pa, *b = pb;
	if (a->weight != b->weight)
		return a->weight < b->weight ? 1 : -1;
	/* Deterministic among equals: smaller GPU, then CPU, first. */
	if (a->gpu_milli * (uint32_t)a->count != b->gpu_milli * (uint32_t)b->count)
		return a->gpu_milli * (uint32_t)a->count < b->gpu_milli * (uint32_t)b->count ? -1 : 1;
	if (a->cpu_milli != b->cpu_milli)
		return a->cpu_milli < b->cpu_milli ? -1 : 1;
	return a->spec - b->spec;
}

void workload_rebuild(struct workload *wl)
{
	wl->version++;
	wl->since_rebuild = 0;
	wl->npop = 0;
	wl->nfast = 0;
	wl->p_cpu_only = 0;
	wl->cpu_per_gpu = 0;
	wl->mem_per_gpu = 0;
	if (wl->total <= 0)
		return;
	/* Sort a copy of the histogram by weight; keep the top until the cut. */
	int n = wl->nshapes;
	for (int i = 0; i < n; i++) {
		wl->pop[i].s = wl->shapes[i];
		wl->pop[i].p = 0;
	}
	for (int i = 1; i < n; i++) {
		struct wl_pop x = wl->pop[i];
		int j = i;
		while (j > 0 && by_weight_desc(&wl->pop[j - 1].s, &x.s) > 0) {
			wl->pop[j] = wl->pop[j - 1];
			j--;
		}
		wl->pop[j] = x;
	}
	double want = wl->total * WL_POPULARITY / 100.0, cum = 0;
	int k = 0;
	while (k < n && cum < want) {
		cum += wl->pop[k].s.weight;
		k++;
	}
	wl->npop = k;
	for (int i = 0; i < k; i++) {
		struct wl_pop *e = &wl->pop[i];
		e->p = e->s.weight / cum;
		if (!e->s.count)
			wl->p_cpu_only += e->p;
	}
	host_per_gpu(wl->pop, k, &wl->cpu_per_gpu, &wl->mem_per_gpu);
	/* The scan layout: GPU shapes by ascending milli (insertion: few entries). */
	for (int i = 0; i < k; i++) {
		const struct wl_pop *e = &wl->pop[i];
		if (!e->s.count)
			continue;
		struct wl_fast x = { (int32_t)e->s.gpu_milli, (int16_t)e->s.count, (int16_t)e->s.spec,
				     e->s.cpu_milli, e->s.mem_mib, e->p };
		int j = wl->nfast++;
		while (j > 0 && wl->fast[j - 1].milli > x.milli) {
			wl->fast[j] = wl->fast[j - 1];
			j--;
		}
		wl->fast[j] = x;
	}
}

void workload_host_per_gpu(const struct workload *wl, double *cpu, double *mem)
{
	if (wl) {
		*cpu = wl->cpu_per_gpu;
		*mem = wl->mem_per_gpu;
		return;
	}
	host_per_gpu(prior, NPRIOR, cpu, mem);
}

void workload_init(struct workload *wl, bool with_prior)
{
	memset(wl, 0, sizeof(*wl));
	wl->rebuild_frac = 0.25;
	if (with_prior)
		for (int i = 0; i < NPRIOR; i++)
			add_shape(wl, &prior[i].s, WL_PRIOR_WEIGHT * prior[i].p);
	workload_rebuild(wl);
}

void workload_observe(struct workload *wl, const struct claim *c)
{
	struct wl_shape s;
	workload_shape_of(wl, c, &s);
	if (s.spec == -2)
		s.spec = spec_intern(wl, c->models);
	if (s.spec == -2)
		s.spec = -1;   /* table full: treat as unconstrained */
	add_shape(wl, &s, 1.0);
	if (wl->total > WL_DECAY_AT) {
		wl->total = 0;
		for (int i = 0; i < wl->nshapes; i++) {
			wl->shapes[i].weight /= 2;
			wl->shapes[i].mem_weighted /= 2;
			wl->total += wl->shapes[i].weight;
		}
		wl->since_rebuild /= 2;
	}
	/*
	 * Rebuild when the weight seen since the last snapshot is a fair part
	 * of the whole: often while the mix is being learned, rarely once it
	 * is known (policies cache on version).
	 */
	double need = wl->total * wl->rebuild_frac;
	if (need < 4)
		need = 4;
	if (wl->since_rebuild >= need)
		workload_rebuild(wl);
}
