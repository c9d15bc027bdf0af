/*
 * The FGD benchmark's baseline policies, as its simulator implements them
 * (fgd-benchmark.md section 6): Random, DotProd, GpuClustering, GpuPacking,
 * BestFit. Scores are the simulator's integer 0..100 node scores, truncated
 * the same way, because the truncation decides which nodes tie (and ties are
 * broken at random by the caller). A shared claim takes the best-fit GPU
 * (PACK_BINPACK: least room left that still fits), except under Random.
 */
#include "policy_impl.h"

#include <string.h>

/* The benchmark's normalisation: the largest node it models. */
#define MAX_SPEC_CPU 128000.0   /* millicores */
#define MAX_SPEC_GPU 8000       /* milli-GPU */

static double cpu_free(const struct gpu_node *n)
{
	return n->cpu_cap ? (double)(n->cpu_cap - n->cpu_used) : 0;
}

/* ---- random ----------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* A uniformly random feasible node (the score is a hash of the decision's seed
 * and the node), and for a shared claim a random fitting GPU. */
static bool place_random(const struct policy_ctx *ctx, const struct gpu_node *n,
			 const struct claim *c, struct fit *f, double *score)
{
	if (ctx->rate_only) {
		f->ok = true;   /* the caller knows it fits: only the rating */
		f->ndev = 0;
	} else if (!fit_node(n, c, PACK_BINPACK, f)) {
		return false;
	}
	uint64_t h = mix64(ctx->seed ^ policy_hash(n->name));
	*score = (double)(h >> 11) / 9007199254740992.0;
	if (ctx->rate_only)
		return true;
	if (c->mode == CLAIM_SHARED && c->count == 1) {
		int idx[GPU_MAX_DEVICES];
		int k = fit_candidates(n, c, idx);
		if (k > 0)
			f->dev[0] = idx[mix64(h) % (uint64_t)k];
	}
	return true;
}

static double rate_none(const struct policy_ctx *ctx, const struct gpu_node *n,
			const struct claim *c, const struct fit *f)
{
	(void)ctx, (void)n, (void)c, (void)f;
	return 0;
}

/* ---- dotprod ---------------------------------------------------------- */

/* 100 (1 - dot(free, demand) / 2), both normalised by the largest node. */
static double rate_dotprod(const struct policy_ctx *ctx, const struct gpu_node *n,
			   const struct claim *c, const struct fit *f)
{
	(void)ctx, (void)f;
	double dot = cpu_free(n) / MAX_SPEC_CPU * ((double)c->cpu_milli / MAX_SPEC_CPU) +
		     (double)policy_free_milli(n) / MAX_SPEC_GPU *
		     ((double)claim_gpu_milli(c) / MAX_SPEC_GPU);
	return (double)(int64_t)(100.0 * (1.0 - dot / 2.0));
}

/* ---- clustering ------------------------------------------------------- */

/*
 * Tiers, best first: a node running only t's kind of task (75-100), several
 * kinds including t's (50-75), no GPU task yet (25-50), other kinds only
 * (0-25); within a tier, less idle GPU is better. CPU-only tasks: all 0.
 */
static double rate_clustering(const struct policy_ctx *ctx, const struct gpu_node *n,
			      const struct claim *c, const struct fit *f)
{
	(void)ctx, (void)f;
	if (!claim_wants_gpu(c))
		return 0;
	uint32_t kinds = n->task_kinds & ~TASK_KIND_CPU_ONLY;
	uint32_t mine = claim_task_kind(c);
	int64_t base = 25 * (MAX_SPEC_GPU - policy_free_milli(n)) / MAX_SPEC_GPU;
	if (kinds & mine)
		return (double)(base + (__builtin_popcount(kinds) == 1 ? 75 : 50));
	return (double)(base + (kinds ? 0 : 25));
}

/* ---- packing ---------------------------------------------------------- */

/*
 * Highest first: only partly used GPUs needed (90-100, fuller is better),
 * free GPUs on a node already in use (33-50, fewer is better), an idle node
 * (<= 33). CPU-only tasks: all 0.
 */
static double rate_packing(const struct policy_ctx *ctx, const struct gpu_node *n,
			   const struct claim *c, const struct fit *f)
{
	(void)ctx;
	if (claim_gpu_milli(c) <= 0)
		return 0;
	int total = 0, fully_free = 0;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		if (d->mig)
			continue;
		total++;
		if (gpu_usable(d) && !d->exclusive && !d->shared && d->used_core == 0)
			fully_free++;
	}
	if (fully_free == total) {
		int64_t s = 100 / 3 - fully_free;
		return (double)(s > fully_free ? s : fully_free);
	}
	int new_gpus = 0;
	int64_t ratio = 0;
	for (int k = 0; k < f->ndev; k++) {
		const struct gpu_device *d = &n->dev[f->dev[k]];
		if (d->shared == 0 && d->used_core == 0)
			new_gpus++;
		ratio += (int64_t)gpu_free_core(d) * 100 / GPU_CORE_FULL;
	}
	if (new_gpus) {
		int64_t s = 100 / 2 - new_gpus;
		return (double)(s > 100 / 3 ? s : 100 / 3);
	}
	int64_t s = 100 - ratio / 10;
	return (double)(s > 100 / 2 ? s : 100 / 2);
}

/* ---- bestfit ---------------------------------------------------------- */

/* 100 (1 - (CPU left after)/2 - (GPU left after)/2), normalised: tightest wins. */
static double rate_bestfit(const struct policy_ctx *ctx, const struct gpu_node *n,
			   const struct claim *c, const struct fit *f)
{
	(void)ctx, (void)f;
	double left = (cpu_free(n) - (double)c->cpu_milli) / MAX_SPEC_CPU * 0.5 +
		      (double)(policy_free_milli(n) - claim_gpu_milli(c)) / MAX_SPEC_GPU * 0.5;
	return (double)(int64_t)((1.0 - left) * 100.0);
}

const struct policy_def policy_random_def = {
	"random", PACK_BINPACK, rate_none, place_random, POLICY_USES_SEED | POLICY_USES_NAME };
const struct policy_def policy_dotprod_def = {
	"dotprod", PACK_BINPACK, rate_dotprod, NULL, 0 };
const struct policy_def policy_clustering_def = {
	"clustering", PACK_BINPACK, rate_clustering, NULL, 0 };
const struct policy_def policy_packing_def = {
	"packing", PACK_BINPACK, rate_packing, NULL, 0 };
const struct policy_def policy_bestfit_def = {
	"bestfit", PACK_BINPACK, rate_bestfit, NULL, 0 };
