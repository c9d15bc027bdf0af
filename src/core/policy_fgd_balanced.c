/*
 * fgd-balanced: fragmentation gradient descent that also keeps each node's
 * host able to feed its GPUs, with the task mix learned online.
 *
 * FGD (policy_fgd.c) places a task where the node's expected GPU
 * fragmentation F_n(M) grows least. Replaying the openb traces shows where
 * FGD still loses GPUs once the cluster is nearly full: besides the slivers
 * of shared GPUs (mostly unavoidable: an offline first-fit-decreasing packing
 * of the same shares wastes about as much), whole GPUs sit idle on nodes
 * whose CPU or memory ran out first (8-GPU nodes with 12 vCPU per GPU, fed
 * tasks that bring 15-25 vCPU per GPU). F_n(M) only notices when a shape
 * stops fitting, which is too late. This policy adds to the fragmentation
 * change the change in stranded GPUs (frag_stranded(): idle GPUs beyond what
 * the node's free CPU and memory carry at the mix's average CPU and memory
 * per GPU), weighted LAMBDA milli-GPU per GPU. The effect: CPU- and
 * memory-hungry GPU tasks drift to host-rich nodes, lean ones to host-poor
 * nodes, before anything is stranded. The fit test of each shape also checks
 * host memory (the paper's only checks CPU).
 *
 * Like FGD, the change is rated in buckets (BUCKET milli-GPU, coarser than
 * FGD's): differences smaller than that are noise in an estimate over a
 * learned mix, and packing matters more. Within a node the exact change
 * picks the GPU of a shared task. Within a bucket the node wins by a fixed
 * pseudo-random order (a hash of its name),
 * which packs like first-fit over a random node order (what makes FGD work
 * in the paper's simulator) without relying on how the caller breaks ties;
 * so the policy behaves the same whether ties go to the first node or to a
 * random one.
 *
 * M is ctx->wl's snapshot, learned online (the prior when NULL).
 */
#include "frag.h"
#include "policy_impl.h"

#include <math.h>

/*
 * Tuned on seeds 1..6 (the reported numbers use 42..51) of default, cpu200,
 * cpu250, gpushare60, gpushare100, multigpu30, multigpu50, gpuspec20 and
 * gpuspec33; see docs/simulation.md. Finer buckets cost the gpuspec traces
 * (constrained tasks need whole untouched nodes of their model), a heavier
 * LAMBDA the multigpu ones (it breaks up empty 8-GPU nodes).
 */
#define LAMBDA 400.0   /* milli-GPU of penalty per stranded GPU */
#define BUCKET 300.0   /* milli-GPU: the resolution the change is rated at */
#define ORDER_WEIGHT 0.5   /* the in-bucket order term, below one bucket */

/* The node's measure: expected fragment plus stranded GPUs, milli-GPU. */
static double measure(const struct frag_node *fn, const struct workload *wl)
{
	return frag_amount(fn, wl, FRAG_HOST_MEM) + LAMBDA * frag_stranded(fn, wl);
}

static uint64_t node_order(const char *name)
{
	uint64_t h = policy_hash(name);   /* then a mix */
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 32);
}

/* The measure's improvement; within a node the exact change picks the GPU. */
static double improvement(double before, double after)
{
	return before - after;
}

/*
 * Higher is better: 0 for an improvement in [0, BUCKET), 1 for one BUCKET
 * more, -1 for any growth up to a BUCKET, and so on.
 */
static double bucket(double improved)
{
	return floor(improved / BUCKET);
}

static bool place_balanced(const struct policy_ctx *ctx, const struct gpu_node *n,
			   const struct claim *c, struct fit *f, double *score)
{
	if (!fit_node(n, c, PACK_BINPACK, f))
		return false;
	double order = ORDER_WEIGHT * (double)(node_order(n->name) >> 11) / 9007199254740992.0;
	*score = bucket(frag_rate_placement(n, c, f, ctx->wl, measure, improvement)) + order;
	return true;
}

const struct policy_def policy_fgd_balanced_def = {
	"fgd-balanced", PACK_BINPACK, NULL, place_balanced,
	POLICY_USES_WORKLOAD | POLICY_USES_NAME };
