/* EXPERIMENTAL: knobs via environment (removed before commit). */
#include "frag.h"
#include "policy_impl.h"

#include <math.h>
#include <stdlib.h>

int fx_gap[1001];   /* EXPERIMENT: cluster histogram of partial-GPU gaps, kept by the sim */
static double knob(const char *name, double def)
{
	static const char *names[32];
	static double vals[32];
	static int n;
	for (int i = 0; i < n; i++)
		if (names[i] == name)
			return vals[i];
	const char *v = getenv(name);
	names[n] = name;
	vals[n] = v ? atof(v) : def;
	return vals[n++];
}

static double fx_amount(const struct frag_node *fn, const struct workload *wl, unsigned flags)
{
	int n;
	const struct wl_pop *pop = workload_snapshot(wl, &n);
	double w = knob("FX_W", 0), cw = knob("FX_CPUW", 1), sum = 0, norm = 0;
	for (int i = 0; i < n; i++) {
		double p = pop[i].p * (1 + w * (double)pop[i].s.gpu_milli * pop[i].s.count / 1000.0);
		if (!pop[i].s.count)
			p *= cw;
		norm += p;
		sum += p * frag_shape(fn, &pop[i].s, flags);
	}
	return norm > 0 ? sum / norm : 0;
}

/* Free GPUs that lack the CPU / memory an average task brings per GPU. */
static double stranded(const struct frag_node *fn, const struct workload *wl)
{
	int n;
	const struct wl_pop *pop = workload_snapshot(wl, &n);
	double cpu = 0, mem = 0, gpu = 0;
	for (int i = 0; i < n; i++) {
		cpu += pop[i].p * (double)pop[i].s.cpu_milli;
		mem += pop[i].p * (double)pop[i].s.mem_mib;
		gpu += pop[i].p * (double)pop[i].s.gpu_milli * pop[i].s.count / 1000.0;
	}
	if (gpu <= 0)
		return 0;
	double g = (double)fn->free_sum / 1000.0;
	double sc = fn->cpu_free == INT64_MAX ? 0 : g - (double)fn->cpu_free / (cpu / gpu);
	double sm = fn->mem_free == INT64_MAX || knob("FX_SMEM", 1) == 0 ? 0 : g - (double)fn->mem_free / (mem / gpu);
	double s = sc > sm ? sc : sm;
	return s > 0 ? s : 0;
}

static double util_of(const struct frag_node *fn, int64_t gcap)
{
	return gcap ? 1.0 - (double)fn->free_sum / (double)gcap : 0;
}

static double rate_after(const struct policy_ctx *ctx, const struct frag_node *before_fn,
			 double before, const struct frag_node *after, unsigned flags,
			 const struct gpu_node *n)
{
	double d = fx_amount(after, ctx->wl, flags) - before;
	double sw = knob("FX_STRAND", 0);
	if (sw != 0)
		d += sw * (stranded(after, ctx->wl) - stranded(before_fn, ctx->wl));
	double q = knob("FX_QUANT", 0);
	double s;
	if (q > 0)
		s = (double)(int64_t)(100.0 / (1.0 + exp(d / 1000.0)));
	else
		s = -d;
	double tie = knob("FX_TIE", 0);
	if (tie != 0) {
		int64_t gcap = (int64_t)before_fn->ngpu * GPU_CORE_FULL;
		s += tie * util_of(after, gcap);
	}
	double hw = knob("FX_HASH", 0);
	if (hw != 0) {
		uint64_t h = 1469598103934665603ULL;
		for (const char *p = n->name; *p; p++)
			h = (h ^ (unsigned char)*p) * 1099511628211ULL;
		h ^= h >> 29;
		h *= 0xbf58476d1ce4e5b9ULL;
		h ^= h >> 32;
		s += hw * (double)(h >> 11) / 9007199254740992.0;
	}
	double cpuw = knob("FX_CPU", 0);
	if (cpuw != 0 && n->cpu_cap) {
		s += cpuw * (double)(n->cpu_cap - after->cpu_free) / (double)n->cpu_cap;
	}
	return s;
}

static bool place_fgdx(const struct policy_ctx *ctx, const struct gpu_node *n,
		       const struct claim *c, struct fit *f, double *score)
{
	if (!fit_node(n, c, PACK_BINPACK, f))
		return false;
	unsigned flags = knob("FX_MEM", 0) > 0 ? FRAG_HOST_MEM : 0;
	struct frag_node fn;
	frag_node_init(&fn, n, ctx->wl);
	double before = fx_amount(&fn, ctx->wl, flags);
	if (c->mode == CLAIM_SHARED && c->count == 1) {
		int idx[GPU_MAX_DEVICES];
		int k = fit_candidates(n, c, idx);
		double best = -INFINITY;
		for (int i = 0; i < k; i++) {
			int e = frag_node_find(&fn, idx[i]);
			if (e < 0)
				continue;
			struct frag_node after = fn;
			frag_node_take(&after, e, (int)c->core, c->cpu_milli, c->mem_mib_host);
			double s = knob("FX_SSONLY", 0) > 0 ? 0 : rate_after(ctx, &fn, before, &after, flags, n);
			double ssw = knob("FX_SS", 0);
			if (ssw > 0) {
				int g = fn.free[e], r = g - (int)c->core;
				double d;
				if (g >= GPU_CORE_FULL)
					d = r > 0 ? 2.0 * fx_gap[r] + 1 : 0;
				else
					d = (r > 0 ? 2.0 * fx_gap[r] + 1 : 0) - 2.0 * fx_gap[g] + 1;
				s -= ssw * d;
				if (knob("FX_SSONLY", 0) > 0)
					s += knob("FX_TIE", 0) * util_of(&after, (int64_t)fn.ngpu * GPU_CORE_FULL);
			}
			/* GPU-level tiebreak: fullest GPU */
			double gt = knob("FX_GTIE", 0);
			double sg = s + gt * (1000 - fn.free[e]) / 1000.0;
			if (sg > best) {
				best = sg;
				f->dev[0] = idx[i];
				*score = s;
			}
		}
		return true;
	}
	struct frag_node after = fn;
	for (int i = 0; i < f->ndev; i++) {
		int e = frag_node_find(&after, f->dev[i]);
		if (e >= 0)
			frag_node_take(&after, e, c->mode == CLAIM_SHARED ? (int)c->core : GPU_CORE_FULL, 0, 0);
	}
	frag_node_take(&after, -1, 0, c->cpu_milli, c->mem_mib_host);
	*score = rate_after(ctx, &fn, before, &after, flags, n);
	return true;
}

const struct policy_def policy_fgdx_def = {
	"fgdx", PACK_BINPACK, NULL, place_fgdx, POLICY_USES_WORKLOAD };
