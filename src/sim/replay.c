/*
 * The replay: one policy, one seed. Tasks arrive one by one in a shuffled,
 * inflated order (fgd-benchmark.md section 2); each is placed on the node the
 * policy rates best, ties broken at random, or fails for good. The node
 * ratings come from policy_place(), the server's own scoring core.
 *
 * Speed: a rating depends only on the node's state, the claim and, for some
 * policies, the workload snapshot. So ratings are memoised per (distinct
 * claim, node), keyed by the node's generation (bumped when a task lands
 * on it) and the workload's version. One placement then re-rates only the
 * node that changed, unless the workload moved on. Policies that use
 * ctx.seed are rated afresh every time.
 */
#include "frag.h"
#include "sim_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- xoshiro256** seeded by splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void sim_rng_seed(struct sim_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t sim_rng_next(struct sim_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

uint64_t sim_rng_below(struct sim_rng *r, uint64_t n)
{
	/* Lemire's multiply-shift with rejection: unbiased. */
	unsigned __int128 m = (unsigned __int128)sim_rng_next(r) * n;
	uint64_t lo = (uint64_t)m;
	if (lo < n) {
		uint64_t floor = -n % n;
		while (lo < floor) {
			m = (unsigned __int128)sim_rng_next(r) * n;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/* Fisher-Yates: v[n] in a random order drawn from r. */
static void shuffle(int *v, int n, struct sim_rng *r)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)sim_rng_below(r, (uint64_t)i + 1);
		int t = v[i];
		v[i] = v[j];
		v[j] = t;
	}
}

/* ---- order statistics ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void sim_sort(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
}

double sim_quantile(const double *v, int n, double q)
{
	double pos = q * (n - 1);
	int i = (int)pos;
	if (i >= n - 1)
		return v[n - 1];
	return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

/* ---- arrivals ---- */

int *sim_arrivals(const struct sim_trace *tr, int64_t capacity, double tune, uint64_t seed,
		  int *n)
{
	struct sim_rng r;
	sim_rng_seed(&r, seed);
	double target = tune * (double)capacity;
	double demand = (double)tr->gpu_milli;
	/* Room for the tasks and a few inflated draws; doubled when inflating needs more. */
	size_t cap = (size_t)tr->ntask + 16;
	int *order = malloc(cap * sizeof(*order));
	if (!order)
		return NULL;
	for (int i = 0; i < tr->ntask; i++)
		order[i] = i;
	shuffle(order, tr->ntask, &r);
	size_t len = (size_t)tr->ntask;
	if (demand < target && tr->gpu_milli > 0) {
		/* Inflate: copies of uniformly drawn tasks until the demand reaches the target. */
		while (demand < target) {
			if (len == cap) {
				cap *= 2;
				int *v = realloc(order, cap * sizeof(*v));
				if (!v) {
					free(order);
					return NULL;
				}
				order = v;
			}
			int t = (int)sim_rng_below(&r, (uint64_t)tr->ntask);
			order[len++] = t;
			demand += (double)tr->tasks[t].gpu_milli;
		}
	} else if (demand > target) {
		/* Deflate: drop random tasks until the demand is within the target. */
		char *gone = calloc(len, 1);
		if (!gone) {
			free(order);
			return NULL;
		}
		size_t left = len;
		while (demand > target && left > 0) {
			size_t i = (size_t)sim_rng_below(&r, len);
			if (gone[i])
				continue;
			gone[i] = 1;
			left--;
			demand -= (double)tr->tasks[order[i]].gpu_milli;
		}
		size_t k = 0;
		for (size_t i = 0; i < len; i++)
			if (!gone[i])
				order[k++] = order[i];
		len = k;
		free(gone);
	}
	*n = (int)len;
	return order;
}

/* ---- the trace's workload ---- */

void sim_trace_workload(const struct sim_trace *t, struct workload *wl)
{
	workload_init(wl, false);
	wl->rebuild_frac = 1e30;   /* one snapshot, at the end */
	for (int i = 0; i < t->ntask; i++)
		workload_observe(wl, &t->shapes[t->tasks[i].shape]);
	workload_rebuild(wl);
}

/* ---- the placer: one cluster's state and the policy's choice of node ---- */

struct sim_memo {
	double score;     /* -INFINITY: does not fit */
	uint32_t gen;     /* node generation it was rated at; 0 = empty */
	uint32_t ver;     /* workload version it was rated with */
};

int sim_placer_init(struct sim_placer *p, const struct sim_cluster *cl, const struct sim_trace *tr,
		    const struct sim_run_cfg *cfg)
{
	memset(p, 0, sizeof(*p));
	int nn = cl->nnode;
	p->nn = nn;
	p->nodes = calloc((size_t)nn, sizeof(*p->nodes));
	p->gen = malloc((size_t)nn * sizeof(*p->gen));
	/* One row of ratings per distinct claim, allocated up front. */
	p->memo = calloc((size_t)tr->nshape * (size_t)nn, sizeof(*p->memo));
	p->perm = malloc((size_t)nn * sizeof(*p->perm));
	if (!p->nodes || !p->gen || !p->memo || !p->perm)
		goto fail;
	for (int i = 0; i < nn; i++) {
		p->perm[i] = i;
		p->nodes[i] = gpu_node_clone(cl->nodes[i]);
		if (!p->nodes[i])
			goto fail;
		p->gen[i] = 1;
	}
	p->wl = cfg->trace_wl;
	if (cfg->wl_mode == SIM_WL_ONLINE) {
		p->own = malloc(sizeof(*p->own));
		if (!p->own)
			goto fail;
		workload_init(p->own, true);
		p->wl = p->own;
	}
	p->flags = policy_flags(cfg->policy);
	p->ctx = (struct policy_ctx){ .id = cfg->policy, .wl = p->wl, .seed = 0, .rate_only = true };
	p->tie_rule = cfg->ties;
	sim_rng_seed(&p->ties, cfg->seed ^ 0x7469657362726b73ULL);
	/* The order nodes are rated in: first best wins unless ties are random. */
	if (cfg->ties == SIM_TIES_ORDER) {
		struct sim_rng pr;
		sim_rng_seed(&pr, cfg->seed ^ 0x6e6f64656f726472ULL);
		shuffle(p->perm, nn, &pr);
	}
	return 0;
fail:
	sim_placer_release(p);
	return -1;
}

void sim_placer_release(struct sim_placer *p)
{
	if (p->nodes)
		for (int i = 0; i < p->nn; i++)
			gpu_node_free(p->nodes[i]);
	free(p->nodes);
	free(p->gen);
	free(p->memo);
	free(p->perm);
	free(p->own);
	memset(p, 0, sizeof(*p));
}

int sim_placer_pick(struct sim_placer *p, int shape, const struct claim *c, struct fit *f)
{
	int nn = p->nn;
	bool memo_ok = !(p->flags & POLICY_USES_SEED);
	if (p->flags & POLICY_USES_SEED)
		p->ctx.seed = sim_rng_next(&p->ties);
	uint32_t ver = (p->flags & POLICY_USES_WORKLOAD) ? p->wl->version : 0;
	struct sim_memo *row = &p->memo[(size_t)shape * (size_t)nn];
	double best = -INFINITY;
	long nbest = 0;
	int win = -1;
	for (int ii = 0; ii < nn; ii++) {
		int i = p->perm[ii];
		double sc;
		struct sim_memo *m = &row[i];
		bool known = m->gen == p->gen[i];
		if (known && (m->score == -INFINITY || (memo_ok && m->ver == ver))) {
			/* Known: infeasible (whatever the policy), or rated. */
			sc = m->score;
		} else {
			struct fit rf;
			/*
			 * The cheap feasibility test first (no reason text to
			 * format), unless this node is known to fit.
			 */
			if ((!known && !fit_possible(p->nodes[i], c)) ||
			    !policy_place(&p->ctx, p->nodes[i], c, &rf, &sc))
				sc = -INFINITY;
			m->score = sc;
			m->gen = p->gen[i];
			m->ver = ver;
		}
		if (sc < best || sc == -INFINITY)
			continue;
		if (sc > best) {
			best = sc;
			nbest = 1;
			win = i;
		} else if (p->tie_rule == SIM_TIES_RANDOM &&
			   sim_rng_below(&p->ties, (uint64_t)++nbest) == 0) {
			win = i;
		}
	}
	double sc;
	p->ctx.rate_only = false;
	bool ok = win >= 0 && policy_place(&p->ctx, p->nodes[win], c, f, &sc);
	p->ctx.rate_only = true;
	return ok ? win : -1;
}

void sim_placer_apply(struct sim_placer *p, int node, const struct claim *c, const struct fit *f)
{
	fit_apply(p->nodes[node], c, f);
	p->gen[node]++;
}

void sim_placer_unapply(struct sim_placer *p, int node, const struct claim *c, const struct fit *f)
{
	struct gpu_node *n = p->nodes[node];
	fit_unapply(n, c, f);
	p->gen[node]++;
	/*
	 * task_kinds says what runs on the node (GPU clustering reads it);
	 * fit_unapply cannot know what else still runs there, but an empty
	 * node runs nothing.
	 */
	if (n->cpu_used || n->mem_used)
		return;
	for (int d = 0; d < n->ndev; d++)
		if (n->dev[d].exclusive || n->dev[d].shared)
			return;
	n->task_kinds = 0;
}

void sim_placer_observe(struct sim_placer *p, const struct claim *c)
{
	if (p->own)
		workload_observe(p->own, c);
}

/* ---- the replay ---- */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double node_frag(const struct gpu_node *n, const struct workload *wl)
{
	struct frag_node fn;
	frag_node_init(&fn, n, wl);
	return frag_amount(&fn, wl, 0);
}

int sim_run(const struct sim_cluster *cl, const struct sim_trace *tr,
	    const struct sim_run_cfg *cfg, struct sim_result *out)
{
	memset(out, 0, sizeof(*out));
	int nn = cl->nnode, narr = 0, rc = -1;
	struct sim_placer pl;
	if (sim_placer_init(&pl, cl, tr, cfg))
		return -1;
	double *frag = malloc((size_t)nn * sizeof(*frag));
	int *order = sim_arrivals(tr, cl->gpu_milli, cfg->tune, cfg->seed, &narr);
	if (!frag || !order)
		goto out;
	double frag_sum = 0;
	for (int i = 0; i < nn; i++) {
		frag[i] = node_frag(pl.nodes[i], cfg->trace_wl);
		frag_sum += frag[i];
	}
	double frag0 = frag_sum;

	double cap = (double)cl->gpu_milli;
	double sum_alloc[SIM_NBINS] = { 0 }, sum_frag[SIM_NBINS] = { 0 };
	long cnt[SIM_NBINS] = { 0 };
	double arrived = 0, allocated = 0;

	double t0 = now();
	for (int a = 0; a < narr; a++) {
		const struct sim_task *task = &tr->tasks[order[a]];
		const struct claim *c = &tr->shapes[task->shape];
		struct fit f;
		int win = sim_placer_pick(&pl, task->shape, c, &f);
		if (win >= 0) {
			sim_placer_apply(&pl, win, c, &f);
			allocated += (double)task->gpu_milli;
			out->placed++;
			double fr = node_frag(pl.nodes[win], cfg->trace_wl);
			frag_sum += fr - frag[win];
			frag[win] = fr;
		} else {
			out->failed++;
		}
		arrived += (double)task->gpu_milli;
		sim_placer_observe(&pl, c);
		int b = (int)floor(arrived * 100.0 / cap + 0.5);
		if (b <= SIM_MAX_PCT) {
			sum_alloc[b] += allocated * 100.0 / cap;
			sum_frag[b] += frag_sum * 100.0 / cap;
			cnt[b]++;
		}
	}
	out->seconds = now() - t0;
	out->arrivals = narr;
	/* Bins no arrival landed in carry the previous value. */
	for (int b = 0; b < SIM_NBINS; b++) {
		if (cnt[b]) {
			out->alloc[b] = sum_alloc[b] / (double)cnt[b];
			out->frag[b] = sum_frag[b] / (double)cnt[b];
		} else if (b > 0) {
			out->alloc[b] = out->alloc[b - 1];
			out->frag[b] = out->frag[b - 1];
		} else {
			out->frag[b] = frag0 * 100.0 / cap;
		}
	}
	rc = 0;
out:
	sim_placer_release(&pl);
	free(frag);
	free(order);
	return rc;
}
