#include "frag.h"

#include <math.h>
#include <string.h>

/* Inserts entry (free, idx, specs) keeping free[] descending, stable by position. */
static void insert_sorted(struct frag_node *fn, int fr, int idx, uint32_t specs)
{
	int k = fn->ngpu++;
	while (k > 0 && fn->free[k - 1] < fr) {
		fn->free[k] = fn->free[k - 1];
		fn->idx[k] = fn->idx[k - 1];
		fn->specs[k] = fn->specs[k - 1];
		k--;
	}
	fn->free[k] = (int16_t)fr;
	fn->idx[k] = (uint8_t)idx;
	fn->specs[k] = specs;
}

void frag_node_init(struct frag_node *fn, const struct gpu_node *n, const struct workload *wl)
{
	fn->ngpu = 0;
	fn->free_sum = 0;
	fn->specs_all = ~0u;
	fn->mixed = false;
	fn->cpu_free = n->cpu_cap ? n->cpu_cap - n->cpu_used : INT64_MAX;
	fn->mem_free = n->mem_cap ? n->mem_cap - n->mem_used : INT64_MAX;
	int nspecs = wl ? wl->nspecs : 0;
	const struct gpu_device_info *last = NULL;   /* the model whose bits are in last_bits */
	uint32_t last_bits = 0;
	bool first = true;
	for (int i = 0; i < n->ndev && i < GPU_MAX_DEVICES; i++) {
		const struct gpu_device *d = &n->dev[i];
		const struct gpu_device_info *in = &n->info[i];
		if (d->mig || !gpu_usable(d))
			continue;
		uint32_t bits = 0;
		if (!nspecs) {
			/* No model constraints in the mix: nothing to match. */
		} else if (last && !strcmp(last->model, in->model)) {
			bits = last_bits;
		} else {
			for (int s = 0; s < nspecs; s++)
				if (gpu_model_matches(wl->specs[s], in))
					bits |= 1u << s;
			last = in;
			last_bits = bits;
		}
		if (!first && bits != fn->specs_all)
			fn->mixed = true;
		fn->specs_all &= bits;
		first = false;
		int fr = d->exclusive ? 0 : (int)gpu_free_core(d);
		insert_sorted(fn, fr, i, bits);
		fn->free_sum += fr;
	}
	if (first)
		fn->specs_all = 0;
}

int frag_node_find(const struct frag_node *fn, int dev)
{
	for (int k = 0; k < fn->ngpu; k++)
		if (fn->idx[k] == dev)
			return k;
	return -1;
}

void frag_node_take(struct frag_node *fn, int k, int milli, int64_t cpu, int64_t mem)
{
	if (k >= 0 && k < fn->ngpu) {
		int fr = fn->free[k] - milli;
		if (fr < 0)
			fr = 0;
		fn->free_sum -= fn->free[k] - fr;
		int16_t idx = fn->idx[k];
		uint32_t specs = fn->specs[k];
		/* The entry only shrinks: move it right past larger ones. */
		while (k + 1 < fn->ngpu && fn->free[k + 1] > fr) {
			fn->free[k] = fn->free[k + 1];
			fn->idx[k] = fn->idx[k + 1];
			fn->specs[k] = fn->specs[k + 1];
			k++;
		}
		fn->free[k] = (int16_t)fr;
		fn->idx[k] = (uint8_t)idx;
		fn->specs[k] = specs;
	}
	if (fn->cpu_free != INT64_MAX)
		fn->cpu_free -= cpu;
	if (fn->mem_free != INT64_MAX)
		fn->mem_free -= mem;
}

double frag_shape(const struct frag_node *fn, const struct wl_shape *m, unsigned flags)
{
	if (!m->count || fn->cpu_free < m->cpu_milli)
		return (double)fn->free_sum;
	if ((flags & FRAG_HOST_MEM) && fn->mem_free < m->mem_mib)
		return (double)fn->free_sum;
	int r = (int)m->gpu_milli, k = 0;
	int64_t usable = 0;
	if (m->spec < 0 || !fn->mixed) {
		if (m->spec >= 0 && !(fn->specs_all >> m->spec & 1u))
			return (double)fn->free_sum;
		while (k < fn->ngpu && fn->free[k] >= r)
			usable += fn->free[k++];
		if (k < m->count)
			return (double)fn->free_sum;
		return (double)(fn->free_sum - usable);
	}
	int fit = 0;
	for (k = 0; k < fn->ngpu && fn->free[k] >= r; k++) {
		if (fn->specs[k] >> m->spec & 1u) {
			usable += fn->free[k];
			fit++;
		}
	}
	if (fit < m->count)
		return (double)fn->free_sum;
	return (double)(fn->free_sum - usable);
}

double frag_amount(const struct frag_node *fn, const struct workload *wl, unsigned flags)
{
	if (!wl) {
		int n;
		const struct wl_pop *pop = workload_snapshot(NULL, &n);
		double sum = 0;
		for (int i = 0; i < n; i++)
			sum += pop[i].p * frag_shape(fn, &pop[i].s, flags);
		return sum;
	}
	/*
	 * The same sum, in one pass: CPU-only shapes see all idle GPU; GPU
	 * shapes come by ascending milli, so the devices with room for them
	 * (free[] is descending) only shrink to a prefix as we go.
	 */
	double total = (double)fn->free_sum;
	double sum = wl->p_cpu_only * total;
	int64_t prefix[GPU_MAX_DEVICES + 1];
	prefix[0] = 0;
	for (int k = 0; k < fn->ngpu; k++)
		prefix[k + 1] = prefix[k] + fn->free[k];
	bool mem = flags & FRAG_HOST_MEM;
	int k = fn->ngpu;
	for (int i = 0; i < wl->nfast; i++) {
		const struct wl_fast *m = &wl->fast[i];
		while (k > 0 && fn->free[k - 1] < m->milli)
			k--;
		double f;
		if (fn->cpu_free < m->cpu || (mem && fn->mem_free < m->mem)) {
			f = total;
		} else if (m->spec < 0 || !fn->mixed) {
			if ((m->spec >= 0 && !(fn->specs_all >> m->spec & 1u)) || k < m->count)
				f = total;
			else
				f = (double)(fn->free_sum - prefix[k]);
		} else {
			struct wl_shape sh = { .cpu_milli = m->cpu, .mem_mib = m->mem,
					       .gpu_milli = (uint32_t)m->milli, .count = m->count,
					       .spec = m->spec };
			f = frag_shape(fn, &sh, flags);
		}
		sum += m->p * f;
	}
	return sum;
}

double frag_stranded(const struct frag_node *fn, const struct workload *wl)
{
	double cpu, mem;
	workload_host_per_gpu(wl, &cpu, &mem);
	double gpus = (double)fn->free_sum / GPU_CORE_FULL, worst = 0;
	if (cpu > 0 && fn->cpu_free != INT64_MAX)
		worst = gpus - (double)fn->cpu_free / cpu;
	if (mem > 0 && fn->mem_free != INT64_MAX && gpus - (double)fn->mem_free / mem > worst)
		worst = gpus - (double)fn->mem_free / mem;
	return worst > 0 ? worst : 0;
}

double frag_rate_placement(const struct gpu_node *n, const struct claim *c, struct fit *f,
			   const struct workload *wl, frag_measure_fn measure, frag_rate_fn rate)
{
	struct frag_node fn;
	frag_node_init(&fn, n, wl);
	double before = measure(&fn, wl);
	if (c->mode == CLAIM_SHARED && c->count == 1) {
		int idx[GPU_MAX_DEVICES], seen[GPU_MAX_DEVICES], nseen = 0;
		int k = fit_candidates(n, c, idx);
		double best = -INFINITY;
		for (int i = 0; i < k; i++) {
			int e = frag_node_find(&fn, idx[i]);
			if (e < 0)
				continue;
			/* Equal idle milli on devices of one kind: the same result. */
			bool dup = false;
			for (int j = 0; j < nseen && !fn.mixed; j++)
				dup |= seen[j] == fn.free[e];
			if (dup)
				continue;
			seen[nseen++] = fn.free[e];
			struct frag_node after = fn;
			frag_node_take(&after, e, (int)c->core, c->cpu_milli, c->mem_mib_host);
			double s = rate(before, measure(&after, wl));
			if (s > best) {
				best = s;
				f->dev[0] = idx[i];
			}
		}
		if (best > -INFINITY)
			return best;
	}
	struct frag_node after = fn;
	for (int i = 0; i < f->ndev; i++) {
		int e = frag_node_find(&after, f->dev[i]);
		if (e >= 0)
			frag_node_take(&after, e, c->mode == CLAIM_SHARED ? (int)c->core : GPU_CORE_FULL, 0, 0);
	}
	frag_node_take(&after, -1, 0, c->cpu_milli, c->mem_mib_host);
	return rate(before, measure(&after, wl));
}
