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

static double fragmentation(const struct frag_node *fn, const struct workload *wl)
{
	return frag_amount(fn, wl, 0);
}

static bool place_fgd(const struct policy_ctx *ctx, const struct gpu_node *n,
		      const struct claim *c, struct fit *f, double *score)
{
	if (!fit_node(n, c, PACK_BINPACK, f))
		return false;
	*score = frag_rate_placement(n, c, f, ctx->wl, fragmentation, quantized);
	return true;
}

const struct policy_def policy_fgd_def = {
	"fgd", PACK_BINPACK, NULL, place_fgd, POLICY_USES_WORKLOAD };
