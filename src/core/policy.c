#include "policy.h"
#include "policy_impl.h"

#include <math.h>
#include <string.h>
#include <strings.h>

static const struct policy_def *const policies[POLICY_COUNT] = {
	[POLICY_BINPACK] = &policy_binpack_def,
	[POLICY_SPREAD] = &policy_spread_def,
	[POLICY_TOPOLOGY] = &policy_topology_def,
	[POLICY_RANDOM] = &policy_random_def,
	[POLICY_DOTPROD] = &policy_dotprod_def,
	[POLICY_CLUSTERING] = &policy_clustering_def,
	[POLICY_PACKING] = &policy_packing_def,
	[POLICY_BESTFIT] = &policy_bestfit_def,
	[POLICY_FGD] = &policy_fgd_def,
	[POLICY_FGD_BALANCED] = &policy_fgd_balanced_def,
};

const char *policy_name(enum policy_id id)
{
	return (unsigned)id < POLICY_COUNT ? policies[id]->name : "unknown";
}

unsigned policy_flags(enum policy_id id)
{
	return (unsigned)id < POLICY_COUNT ? policies[id]->flags : 0;
}

uint64_t policy_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;
	for (; s && *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

int64_t policy_free_milli(const struct gpu_node *n)
{
	int64_t sum = 0;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		if (gpu_usable(d) && !d->mig && !d->exclusive)
			sum += gpu_free_core(d);
	}
	return sum;
}

bool policy_parse(const char *name, enum policy_id *out)
{
	for (int i = 0; i < POLICY_COUNT; i++) {
		if (!strcasecmp(name, policies[i]->name)) {
			*out = (enum policy_id)i;
			return true;
		}
	}
	return false;
}

bool policy_place(const struct policy_ctx *ctx, const struct gpu_node *n,
		  const struct claim *c, struct fit *out, double *score)
{
	const struct policy_def *p = policies[(unsigned)ctx->id < POLICY_COUNT ? ctx->id : 0];
	if (p->place)
		return p->place(ctx, n, c, out, score);
	if (!fit_node(n, c, p->pack, out))
		return false;
	*score = p->rate(ctx, n, c, out);
	return true;
}

void policy_scale(const double *raw, const bool *ok, size_t n, int64_t *out)
{
	double lo = INFINITY, hi = -INFINITY;
	for (size_t i = 0; i < n; i++) {
		if (!ok[i])
			continue;
		lo = raw[i] < lo ? raw[i] : lo;
		hi = raw[i] > hi ? raw[i] : hi;
	}
	/*
	 * Only the best node (and exact ties with it) gets the maximum: with 11
	 * levels, rounding would otherwise tie several near-best nodes, and
	 * kube-scheduler picks among equal totals at random, losing the policy's
	 * order where it matters most.
	 */
	for (size_t i = 0; i < n; i++) {
		if (!ok[i])
			out[i] = 0;
		else if (raw[i] >= hi)
			out[i] = POLICY_SCORE_MAX;
		else
			out[i] = lround((POLICY_SCORE_MAX - 1) * (raw[i] - lo) / (hi - lo));
	}
}

double policy_util_after(const struct gpu_node *n, const struct claim *c, const struct fit *f)
{
	double used = 0;
	int usable = 0;
	int k = 0;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		bool chosen = k < f->ndev && f->dev[k] == i;
		if (chosen)
			k++;
		if (!gpu_usable(d))
			continue;
		usable++;
		bool whole = d->exclusive || (chosen && c->mode != CLAIM_SHARED);
		if (whole) {
			used += 1;
			continue;
		}
		if (!chosen && !d->used_core && !d->used_mib)
			continue;   /* idle: adds 0 (most devices; the division below is the loop's cost) */
		double core = d->used_core + (chosen ? c->core : 0);
		double mib = d->used_mib + (chosen ? c->mem_mib : 0);
		double u = core / GPU_CORE_FULL;
		if (d->memory_mib && mib / d->memory_mib > u)
			u = mib / d->memory_mib;
		used += u > 1 ? 1 : u;
	}
	return usable ? used / usable : 0;
}

bool policy_rate_whole(enum policy_id id, const struct fit_whole *w, const struct claim *c, double *score)
{
	if ((id != POLICY_BINPACK && id != POLICY_SPREAD) || !w->exact || w->free < c->count)
		return false;
	/*
	 * policy_util_after() with integers only: 1 for each device held whole
	 * and each chosen one, 0 for the idle rest, summed in any order alike.
	 */
	double util = (double)(w->held + c->count) / w->usable;
	*score = id == POLICY_BINPACK ? util : 1.0 - util;
	return true;
}

/* binpack: fuller nodes first (and fullest GPUs first, through PACK_BINPACK). */
static double rate_binpack(const struct policy_ctx *ctx, const struct gpu_node *n,
			   const struct claim *c, const struct fit *f)
{
	(void)ctx;
	return policy_util_after(n, c, f);
}

/* spread: emptier nodes first. */
static double rate_spread(const struct policy_ctx *ctx, const struct gpu_node *n,
			  const struct claim *c, const struct fit *f)
{
	(void)ctx;
	return 1.0 - policy_util_after(n, c, f);
}

/*
 * topology: first how well the chosen devices talk to each other (one island
 * beats several; faster islands beat slower), then binpack as the tiebreak.
 */
static double rate_topology(const struct policy_ctx *ctx, const struct gpu_node *n,
			    const struct claim *c, const struct fit *f)
{
	(void)ctx;
	int islands_used = 0, seen[GPU_MAX_ISLANDS] = { 0 };
	double min_bw = INFINITY;
	bool loose = false;    /* a chosen device belongs to no island */
	for (int k = 0; k < f->ndev; k++) {
		int is = n->dev[f->dev[k]].island;
		if (is < 0) {
			loose = true;
			continue;
		}
		if (!seen[is]++)
			islands_used++;
		if (n->islands[is].bandwidth_gbps < min_bw)
			min_bw = n->islands[is].bandwidth_gbps;
	}
	double together, bw = 0;
	if (f->ndev <= 1) {
		together = 1;
		bw = 1;
	} else if (loose || islands_used != 1) {
		together = 0.5 / (islands_used + loose);
	} else {
		together = 1;
		bw = min_bw / (min_bw + 100.0);
	}
	return 100.0 * together + 10.0 * bw + policy_util_after(n, c, f);
}

const struct policy_def policy_binpack_def = { "binpack", PACK_BINPACK, rate_binpack, NULL, 0 };
const struct policy_def policy_spread_def = { "spread", PACK_SPREAD, rate_spread, NULL, 0 };
const struct policy_def policy_topology_def = { "topology", PACK_BINPACK, rate_topology, NULL, 0 };
