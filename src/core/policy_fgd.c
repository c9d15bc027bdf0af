/*
 * fgd: Fragmentation Gradient Descent (Weng et al., "Beware of
 * Fragmentation", USENIX ATC'23), as the paper's simulator implements it
 * (fgd-benchmark.md section 5): place the task where the node's expected
 * fragmentation F_n(M) grows least. The score is the simulator's
 * int(100 * sigmoid(-delta / 1000)), delta in milli-GPU, so deltas within
 * about 40 milli tie and the caller breaks ties at random. A shared claim
 * takes the GPU with the best such score, the lowest index among equals.
 *
 * M is ctx->wl's snapshot (the prior when NULL). In the paper M is the whole
 * trace's task mix, known in advance; the simulator can reproduce that
 * (`--workload trace`), the server learns it online.
 */
#include "frag.h"
#include "policy_impl.h"

#include <math.h>

static double quantized(double before, double after)
{
	double x = (before - after) / 1000.0;
	return (double)(int64_t)(100.0 / (1.0 + exp(-x)));
}

static bool place_fgd(const struct policy_ctx *ctx, const struct gpu_node *n,
		      const struct claim *c, struct fit *f, double *score)
{
	if (!fit_node(n, c, PACK_BINPACK, f))
		return false;
	struct frag_node fn;
	frag_node_init(&fn, n, ctx->wl);
	double before = frag_amount(&fn, ctx->wl, 0);
	if (c->mode == CLAIM_SHARED && c->count == 1) {
		int idx[GPU_MAX_DEVICES];
		int k = fit_candidates(n, c, idx);
		double best = -1;
		int seen[GPU_MAX_DEVICES], nseen = 0;
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
			double s = quantized(before, frag_amount(&after, ctx->wl, 0));
			if (s > best) {
				best = s;
				f->dev[0] = idx[i];
			}
		}
		*score = best;
		return true;
	}
	struct frag_node after = fn;
	for (int i = 0; i < f->ndev; i++) {
		int e = frag_node_find(&after, f->dev[i]);
		if (e >= 0)
			frag_node_take(&after, e, c->mode == CLAIM_SHARED ? (int)c->core : GPU_CORE_FULL, 0, 0);
	}
	frag_node_take(&after, -1, 0, c->cpu_milli, c->mem_mib_host);
	*score = quantized(before, frag_amount(&after, ctx->wl, 0));
	return true;
}

const struct policy_def policy_fgd_def = {
	"fgd", PACK_BINPACK, NULL, place_fgd, POLICY_USES_WORKLOAD };
