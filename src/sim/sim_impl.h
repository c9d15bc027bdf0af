/*
 * Internal to src/sim: the trace model, the replay, the reports.
 */
#ifndef GPU_SIM_IMPL_H
#define GPU_SIM_IMPL_H

#include "buf.h"
#include "claim.h"
#include "gpu.h"
#include "policy.h"
#include "workload.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_PCT 130       /* arrived workload runs 0..130 % */
#define SIM_NBINS (SIM_MAX_PCT + 1)

/* The cluster: nodes in their initial (idle) state. */
struct sim_cluster {
	int nnode;
	struct gpu_node **nodes;
	int64_t gpu_milli;        /* capacity: usable whole devices x 1000 */
};

/* One row of the pod list: which distinct claim it is. */
struct sim_task {
	int shape;
	int64_t gpu_milli;        /* its GPU demand */
};

struct sim_trace {
	int ntask;
	struct sim_task *tasks;
	int nshape;
	struct claim *shapes;     /* the distinct claims, no match labels */
	int64_t gpu_milli;        /* total demand of the rows */
};

/* ---- trace.c: readers ---- */

/*
 * Reads a node list: the openb CSV (sn,cpu_milli,memory_mib,gpu,model) or,
 * when the file starts with '{', the standalone inventory JSON. Writes a
 * one-line reason into err on failure. 0 or -1.
 */
int sim_read_nodes(const char *path, struct sim_cluster *out, char *err, size_t errsz);
/* Reads an openb pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]). */
int sim_read_pods(const char *path, struct sim_trace *out, char *err, size_t errsz);
void sim_cluster_release(struct sim_cluster *c);
void sim_trace_release(struct sim_trace *t);
/* Parses a whole CSV text in memory (for tests): same as the file readers. */
int sim_parse_nodes(const char *text, struct sim_cluster *out, char *err, size_t errsz);
int sim_parse_pods(const char *text, struct sim_trace *out, char *err, size_t errsz);

/* ---- replay.c ---- */

enum sim_wl_mode { SIM_WL_ONLINE = 0, SIM_WL_TRACE };

/*
 * Among equally rated nodes, which one wins. The paper's simulator behaves
 * like ORDER: the first in a node order that is random but fixed for the run
 * (kube-scheduler walks its node list; the list order comes from how the
 * simulator created the nodes). Stock kube-scheduler picks a random one
 * every time (RANDOM). FIRST: the first in the node file.
 */
enum sim_ties { SIM_TIES_ORDER = 0, SIM_TIES_RANDOM, SIM_TIES_FIRST };

struct sim_run_cfg {
	enum policy_id policy;
	enum sim_wl_mode wl_mode;
	uint64_t seed;
	double tune;              /* arrived demand target, x capacity (1.3) */
	const struct workload *trace_wl;   /* the trace's M: trace mode and the frag metric */
	enum sim_ties ties;
};

/* What one run measured, per integer arrived percent. */
struct sim_result {
	double alloc[SIM_NBINS];  /* allocated GPU, % of capacity */
	double frag[SIM_NBINS];   /* fragmented GPU (trace M), % of capacity */
	long arrivals, placed, failed;
	double seconds;           /* the placement loop */
};

/* The trace's task mix as a workload (no prior), for trace mode and the metric. */
void sim_trace_workload(const struct sim_trace *t, struct workload *wl);

/* One replay. 0, or -1 when out of memory. */
int sim_run(const struct sim_cluster *cl, const struct sim_trace *tr,
	    const struct sim_run_cfg *cfg, struct sim_result *out);

/* The arrival order of a seed: indices into tr->tasks (caller frees). */
int *sim_arrivals(const struct sim_trace *tr, int64_t capacity, double tune, uint64_t seed,
		  int *n);

/* ---- rng ---- */
struct sim_rng { uint64_t s[4]; };
void sim_rng_seed(struct sim_rng *r, uint64_t seed);
uint64_t sim_rng_next(struct sim_rng *r);
/* Uniform in [0, n). */
uint64_t sim_rng_below(struct sim_rng *r, uint64_t n);

/* ---- plot.c ---- */

struct sim_series {
	const char *label;
	double median[SIM_NBINS], lo[SIM_NBINS], hi[SIM_NBINS];   /* unallocated % */
};

/* An SVG of unallocated GPU % against arrived workload, one line per series. */
int sim_plot_svg(struct buf *out, const char *title, const struct sim_series *s, int n);

#endif
