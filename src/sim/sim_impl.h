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

/* ---- rng ---- */
struct sim_rng { uint64_t s[4]; };
void sim_rng_seed(struct sim_rng *r, uint64_t seed);
uint64_t sim_rng_next(struct sim_rng *r);
/* Uniform in [0, n). */
uint64_t sim_rng_below(struct sim_rng *r, uint64_t n);

/* Sorts v[n] ascending; the quantile q of sorted v[n], linear between order statistics. */
void sim_sort(double *v, int n);
double sim_quantile(const double *v, int n, double q);

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

/*
 * The placer: a run's copy of the cluster and the policy's choice of node,
 * shared by both replays. Ratings are memoised per (distinct claim, node),
 * keyed by the node's generation (bumped whenever a task lands on it or
 * leaves it) and the workload's version.
 */
struct sim_memo;
struct sim_placer {
	int nn;
	struct gpu_node **nodes;  /* the run's nodes, owned, as they are used now */
	uint32_t *gen;
	struct sim_memo *memo;    /* [shape][node] */
	int *perm;                /* the order nodes are rated in */
	struct policy_ctx ctx;
	unsigned flags;           /* POLICY_USES_* */
	enum sim_ties tie_rule;
	struct sim_rng ties;
	struct workload *own;     /* learned online, or NULL (trace mode) */
	const struct workload *wl;
};

/* 0, or -1 when out of memory (nothing to release then). */
int sim_placer_init(struct sim_placer *p, const struct sim_cluster *cl, const struct sim_trace *tr,
		    const struct sim_run_cfg *cfg);
void sim_placer_release(struct sim_placer *p);
/*
 * The node the policy rates best for c (distinct claim shape of the trace)
 * and its devices there in *f, or -1 when it fits nowhere. Changes nothing
 * but the memo and the random streams.
 */
int sim_placer_pick(struct sim_placer *p, int shape, const struct claim *c, struct fit *f);
/* Records / removes c on a node (f as picked or planned). */
void sim_placer_apply(struct sim_placer *p, int node, const struct claim *c, const struct fit *f);
void sim_placer_unapply(struct sim_placer *p, int node, const struct claim *c, const struct fit *f);
/* One task arrived: the online workload learns it. */
void sim_placer_observe(struct sim_placer *p, const struct claim *c);

/* ---- gangs.c: a gang mix, and a replay in which tasks run and leave ---- */

/*
 * The synthetic gang mix and the clock (docs/simulation.md, "Gangs"): of
 * a seed's arrivals (sim_arrivals()), each whole-GPU task becomes, with
 * probability fraction, a gang of k members (uniform in kmin..kmax), each
 * asking what the task asks, all arriving together. Arrivals are a Poisson
 * stream at the rate that offers load x capacity; each arrival runs for an
 * exponential time of mean mean_run_s once started.
 */
struct sim_gang_cfg {
	double fraction;
	int kmin, kmax;           /* 2 <= kmin <= kmax */
	double load;
	double mean_run_s;
};

/* How the members of a gang are placed. */
enum sim_gang_place {
	SIM_GANG_AWARE = 0,       /* gang_plan(): all at once or none */
	SIM_GANG_MEMBERS,         /* one by one through the policy, holding GPUs meanwhile */
};

/* One arrival: a plain task (members 1), or a gang of copies of it. */
struct sim_job {
	int task;                 /* index into tr->tasks */
	int members;
	double arrive;            /* seconds; non-decreasing along the list */
	double run;               /* seconds it runs once started */
};

struct sim_gang_result {
	long jobs, gangs;
	long started;             /* gangs whose members all got placed */
	long never;               /* gangs not started when nothing is left to run */
	long deadlocked;          /* of those, the ones partly placed: holding GPUs for ever */
	long failed;              /* plain tasks that fit nowhere when they arrived */
	/* Time averages over the second half of the arrivals, % of GPU capacity. */
	double unalloc_pct;       /* GPUs no task holds */
	double idle_pct;          /* GPUs held by partly placed gangs */
	double wait_mean_s, wait_p95_s;   /* arrival to all members placed, started gangs */
	double end_s;             /* the last event */
	double seconds;           /* wall time of the replay */
};

/*
 * The arrivals of a seed with the gang mix and the clock applied (caller
 * frees), n set to their number; NULL when out of memory.
 */
struct sim_job *sim_gang_jobs(const struct sim_trace *tr, int64_t capacity, double tune, uint64_t seed,
			      const struct sim_gang_cfg *g, int *n);

/*
 * Replays jobs[n] until nothing runs any more: policy, workload and ties
 * from cfg (cfg->seed for the ties and the node order; cfg->tune unused).
 * 0, or -1 when out of memory.
 */
int sim_gang_run(const struct sim_cluster *cl, const struct sim_trace *tr, const struct sim_job *jobs,
		 int n, const struct sim_run_cfg *cfg, enum sim_gang_place how,
		 struct sim_gang_result *out);

/* ---- plot.c ---- */

struct sim_series {
	const char *label;
	double median[SIM_NBINS], lo[SIM_NBINS], hi[SIM_NBINS];   /* unallocated % */
};

/* An SVG of unallocated GPU % against arrived workload, one line per series. */
int sim_plot_svg(struct buf *out, const char *title, const struct sim_series *s, int n);

#endif
