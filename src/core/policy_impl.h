/*
 * Internal to src/core: how a policy plugs into policy.c's table. Each
 * policy file defines one or more `const struct policy_def`.
 */
#ifndef GPU_POLICY_IMPL_H
#define GPU_POLICY_IMPL_H

#include "policy.h"

struct policy_def {
	const char *name;
	/* GPU-level choice when the policy lets fit_node() pick devices. */
	enum gpu_pack pack;
	/* Rates placement f of c on n; higher is better. */
	double (*rate)(const struct policy_ctx *ctx, const struct gpu_node *n,
		       const struct claim *c, const struct fit *f);
	/*
	 * Optional: chooses the devices itself (and rates them), for policies
	 * whose device choice depends on their own measure. NULL: fit_node().
	 */
	bool (*place)(const struct policy_ctx *ctx, const struct gpu_node *n,
		      const struct claim *c, struct fit *f, double *score);
	unsigned flags;   /* POLICY_USES_* */
};

/* Average use of n's usable devices (0..1) once f is placed there. */
double policy_util_after(const struct gpu_node *n, const struct claim *c, const struct fit *f);

/* Idle milli-GPU on n's usable whole devices. */
int64_t policy_free_milli(const struct gpu_node *n);

extern const struct policy_def policy_binpack_def, policy_spread_def, policy_topology_def;
/* policy_baselines.c */
extern const struct policy_def policy_random_def, policy_dotprod_def, policy_clustering_def,
	policy_packing_def, policy_bestfit_def;
/* policy_fgd.c */
extern const struct policy_def policy_fgd_def;
/* policy_fgd_balanced.c */
extern const struct policy_def policy_fgd_balanced_def;

#endif
