/*
 * `gpu-extender simulate`: the command line, the run matrix (policies x
 * seeds, in parallel), and the CSV / table / SVG reports; with --gangs, the
 * gang replay (gangs.c) in both placements instead.
 */
#include "sim.h"
#include "sim_impl.h"
#include "opttab.h"
#include "strnum.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_POLICIES 32
#define MAX_SEEDS 1000
#define PLOT_MAX_BYTES (8u << 20)
#define GANG_MEAN_RUN_S 3600.0   /* the gang replay's mean run time */
#define GANG_PLACES 2            /* gang-aware, member-by-member */

struct pol {
	enum policy_id id;
	enum sim_wl_mode mode;
	bool mode_set;      /* NAME:online / NAME:trace given */
	char label[48];
};

#define SIM_PATH_MAX 512

struct opts {
	char nodes[SIM_PATH_MAX], pods[SIM_PATH_MAX], plot[SIM_PATH_MAX], title[256];
	struct pol pol[MAX_POLICIES];
	int npol;
	int seeds;
	uint64_t seed_base;
	double tune;
	bool csv;
	int jobs;
	int wl_default;     /* -1: per policy (fgd: trace, the rest: online) */
	enum sim_ties ties;
	bool gangs;         /* --gangs: the gang replay */
	bool gang_load_set;
	struct sim_gang_cfg gang;
	int64_t seed_base_arg;
	double load_arg;    /* --load; 0: not given */
};

static const char *const GANG_PLACE_NAME[GANG_PLACES] = { "gang-aware", "member-by-member" };

static void usage(FILE *out);
/* "online" or "trace"; false for anything else. */
static bool parse_wl_mode(const char *s, enum sim_wl_mode *mode)
{
	if (!strcmp(s, "online"))
		*mode = SIM_WL_ONLINE;
	else if (!strcmp(s, "trace"))
		*mode = SIM_WL_TRACE;
	else
		return false;
	return true;
}

static int push_policy(struct opts *o, enum policy_id id, enum sim_wl_mode mode, bool mode_set,
		       const char *label)
{
	if (o->npol >= MAX_POLICIES)
		return -1;
	struct pol *p = &o->pol[o->npol++];
	p->id = id;
	p->mode = mode;
	p->mode_set = mode_set;
	str_copy(p->label, sizeof(p->label), label);
	return 0;
}

static int add_policy(struct opts *o, const char *arg)
{
	char name[48];
	if (!str_copy(name, sizeof(name), arg))
		return -1;
	char *colon = strchr(name, ':');
	bool mode_set = colon != NULL;   /* NAME:online / NAME:trace */
	enum sim_wl_mode mode = SIM_WL_ONLINE;
	if (colon) {
		*colon = '\0';
		if (!parse_wl_mode(colon + 1, &mode))
			return -1;
	}
	if (!strcmp(name, "all")) {
		for (int i = 0; i < POLICY_COUNT; i++)
			if (push_policy(o, (enum policy_id)i, mode, mode_set, policy_name((enum policy_id)i)))
				return -1;
		return 0;
	}
	enum policy_id id;
	if (!policy_parse(name, &id))
		return -1;
	return push_policy(o, id, mode, mode_set, arg);
}

/* "F" or "F:MIN-MAX". 0 or -1. */
static int parse_gangs(const char *arg, struct sim_gang_cfg *g)
{
	char f[48];
	if (!str_copy(f, sizeof(f), arg))
		return -1;
	char *colon = strchr(f, ':');
	if (colon) {
		*colon = '\0';
		char *dash = strchr(colon + 1, '-');
		if (!dash)
			return -1;
		*dash = '\0';
		if (!strnum_int(colon + 1, 2, 64, &g->kmin) || !strnum_int(dash + 1, 2, 64, &g->kmax) ||
		    g->kmin > g->kmax)
			return -1;
	}
	if (!strnum_double(f, &g->fraction) || !(g->fraction >= 0 && g->fraction <= 1))
		return -1;
	return 0;
}

static int set_policy(void *base, const struct opt *row, const char *value, const char *label, char *err,
		      size_t errlen)
{
	(void)row;
	if (!add_policy(base, value))
		return 0;
	snprintf(err, errlen, "%s: unknown policy '%s' (or too many)", label, value);
	return -1;
}

static int set_workload(void *base, const struct opt *row, const char *value, const char *label, char *err,
			size_t errlen)
{
	(void)row;
	enum sim_wl_mode mode;
	if (!parse_wl_mode(value, &mode)) {
		snprintf(err, errlen, "%s is online or trace", label);
		return -1;
	}
	((struct opts *)base)->wl_default = (int)mode;
	return 0;
}

static int set_gangs(void *base, const struct opt *row, const char *value, const char *label, char *err,
		     size_t errlen)
{
	(void)row;
	struct opts *o = base;
	if (!parse_gangs(value, &o->gang)) {
		o->gangs = true;
		return 0;
	}
	snprintf(err, errlen, "%s wants FRACTION in [0, 1], optionally :MIN-MAX members with 2 <= MIN <= MAX <= 64",
		 label);
	return -1;
}

static int set_ties(void *base, const struct opt *row, const char *value, const char *label, char *err,
		    size_t errlen)
{
	(void)row;
	struct opts *o = base;
	if (!strcmp(value, "random"))
		o->ties = SIM_TIES_RANDOM;
	else if (!strcmp(value, "first"))
		o->ties = SIM_TIES_FIRST;
	else if (!strcmp(value, "order"))
		o->ties = SIM_TIES_ORDER;
	else {
		snprintf(err, errlen, "%s is order, random or first", label);
		return -1;
	}
	return 0;
}

static int set_format(void *base, const struct opt *row, const char *value, const char *label, char *err,
		      size_t errlen)
{
	(void)row;
	struct opts *o = base;
	if (strcmp(value, "csv") && strcmp(value, "table")) {
		snprintf(err, errlen, "%s is csv or table", label);
		return -1;
	}
	o->csv = !strcmp(value, "csv");
	return 0;
}

#define AT(f) OPT_AT(struct opts, f)

static const struct opt options[] = {
	{ .flag = "nodes", .kind = OPT_STR, AT(nodes), .arg = "FILE",
	  .help = "openb node CSV (sn,cpu_milli,memory_mib,gpu,model) or the standalone inventory (Kubernetes List "
		  "JSON/YAML); required" },
	{ .flag = "pods", .kind = OPT_STR, AT(pods), .arg = "FILE",
	  .help = "openb pod CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]); required" },
	{ .flag = "policy", .kind = OPT_FUNC, .set = set_policy, .arg = "NAME", .shown = "all",
	  .help = "repeatable; 'all' for every policy; NAME:online or NAME:trace picks how the policy learns the "
		  "task mix" },
	{ .flag = "workload", .kind = OPT_FUNC, .set = set_workload, .arg = "MODE",
	  .shown = "trace for fgd (as in the paper), online for the rest",
	  .help = "online (learned as tasks arrive, from a prior) or trace (the whole trace's mix, known in advance)" },
	{ .flag = "seeds", .kind = OPT_INT, AT(seeds), .def = "10", .arg = "N", .lo = 1, .hi = MAX_SEEDS,
	  .help = "seeds SEED-BASE..SEED-BASE+N-1" },
	{ .flag = "seed-base", .kind = OPT_INT, AT(seed_base_arg), .def = "42", .arg = "S", .lo = 0, .hi = 2147483647,
	  .help = "the first seed" },
	{ .flag = "tune", .kind = OPT_DOUBLE, AT(tune), .def = "1.3", .arg = "X", .lo = 0.001, .hi = 10,
	  .help = "arrived GPU demand target, x capacity" },
	{ .flag = "ties", .kind = OPT_FUNC, .set = set_ties, .def = "order", .arg = "MODE",
	  .help = "which of equally rated nodes wins: order, the first in a random node order fixed per seed, which "
		  "reproduces the paper's curves; random, a random one each time (stock kube-scheduler); first, "
		  "file order" },
	{ .flag = "format", .kind = OPT_FUNC, .set = set_format, .def = "table", .arg = "csv|table",
	  .help = "per-seed curves, or medians at 50..130%. csv: policy,seed,arrived_pct,allocated_gpu_pct,"
		  "unallocated_gpu_pct,fragmented_gpu_pct for arrived 0..130; fragmented: FGD's measure under the "
		  "trace's task mix" },
	{ .flag = "plot", .kind = OPT_STR, AT(plot), .arg = "FILE.svg",
	  .help = "unallocated GPU % vs arrived workload, one line per policy" },
	{ .flag = "title", .kind = OPT_STR, AT(title), .arg = "TEXT", .help = "the plot's title" },
	{ .flag = "gangs", .kind = OPT_FUNC, .set = set_gangs, .arg = "F[:MIN-MAX]",
	  .help = "the gang replay instead: each whole-GPU task becomes, with probability F, a gang of MIN..MAX "
		  "(default 2-8) members that arrive together; tasks run (exponential, mean 60 min) and leave; gangs "
		  "placed gang-aware and member-by-member. Prints unallocated GPU %, GPU % held idle by partly placed "
		  "gangs, gang wait, gangs never started, deadlocks (--format csv: a row per policy, seed and "
		  "placement)" },
	{ .flag = "load", .kind = OPT_DOUBLE, AT(load_arg), .arg = "X", .shown = "1.0", .lo = 0.001, .hi = 10,
	  .help = "with --gangs: offered load, x capacity" },
	{ .flag = "jobs", .letter = 'j', .kind = OPT_INT, AT(jobs), .arg = "N", .shown = "online CPUs", .lo = 1,
	  .hi = 1024, .help = "parallel runs" },
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static void usage(FILE *out)
{
	fprintf(out,
		"usage: gpu-extender simulate --nodes FILE --pods FILE [options]\n"
		"\n"
		"Replays a pod list on a node list through the scoring core, as in the FGD\n"
		"benchmark: GPU demand shuffled per seed and inflated to --tune x capacity,\n"
		"tasks placed one by one, a task that fits nowhere fails for good.\n"
		"\n");
	opt_usage(out, options, NOPTIONS);
	fprintf(out, "\npolicies:");
	for (int i = 0; i < POLICY_COUNT; i++)
		fprintf(out, " %s", policy_name((enum policy_id)i));
	fprintf(out, "\n");
}

/* What the options say together, and each policy's workload mode. 0, or -1 with err. */
static int settle(struct opts *o, char *err, size_t errlen)
{
	if (!o->nodes[0] || !o->pods[0]) {
		snprintf(err, errlen, "--nodes and --pods are needed");
		return -1;
	}
	if (o->load_arg > 0 && !o->gangs) {
		snprintf(err, errlen, "--load goes with --gangs");
		return -1;
	}
	if (o->gangs && o->plot[0]) {
		snprintf(err, errlen, "--plot draws the FGD protocol's curves, not --gangs");
		return -1;
	}
	if (o->load_arg > 0)
		o->gang.load = o->load_arg;
	o->seed_base = (uint64_t)o->seed_base_arg;
	if (!o->npol)
		add_policy(o, "all");
	for (int i = 0; i < o->npol; i++) {
		struct pol *p = &o->pol[i];
		if (p->mode_set)
			continue;
		if (o->wl_default >= 0)
			p->mode = (enum sim_wl_mode)o->wl_default;
		else
			p->mode = p->id == POLICY_FGD ? SIM_WL_TRACE : SIM_WL_ONLINE;
	}
	return 0;
}

/* 0 ok, 1 help printed, -1 usage error (said on stderr). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->wl_default = -1;
	o->gang = (struct sim_gang_cfg){ .fraction = 0, .kmin = 2, .kmax = 8, .load = 1.0,
					 .mean_run_s = GANG_MEAN_RUN_S };
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	o->jobs = cpus > 0 ? (int)cpus : 1;
	char err[300];
	const char *pos[1];
	int npos;
	int rc = opt_defaults(options, NOPTIONS, o, err, sizeof(err));
	if (!rc)
		rc = opt_parse(options, NOPTIONS, o, argc, argv, pos, 0, &npos, err, sizeof(err));
	if (rc == OPT_HELP)
		usage(stdout);
	else if (rc == OPT_HELP_MARKDOWN)
		opt_markdown(stdout, options, NOPTIONS);
	if (rc > 0)
		return 1;
	if (!rc)
		rc = settle(o, err, sizeof(err));
	if (!rc)
		return 0;
	fprintf(stderr, "simulate: %s (see --help)\n", err);
	return -1;
}

/* ---- the run matrix ---- */

struct matrix {
	const struct opts *o;
	const struct sim_cluster *cl;
	const struct sim_trace *tr;
	const struct workload *trace_wl;
	struct sim_result *res;     /* [policy][seed] */
	struct sim_gang_result *gres;   /* with --gangs: [policy][seed][placement] */
	int njobs;
	int next;
	int failed;
	pthread_mutex_t lock;
};

/* One policy and seed of the gang replay: the same arrivals placed both ways. */
static int gang_job(struct matrix *m, const struct sim_run_cfg *cfg, int j)
{
	int n;
	struct sim_job *jobs = sim_gang_jobs(m->tr, m->cl->gpu_milli, cfg->tune, cfg->seed,
					     &m->o->gang, &n);
	if (!jobs)
		return -1;
	int rc = 0;
	for (int h = 0; h < GANG_PLACES && !rc; h++)
		rc = sim_gang_run(m->cl, m->tr, jobs, n, cfg, (enum sim_gang_place)h,
				  &m->gres[j * GANG_PLACES + h]);
	free(jobs);
	return rc;
}

static void *worker(void *arg)
{
	struct matrix *m = arg;
	for (;;) {
		pthread_mutex_lock(&m->lock);
		int j = m->next++;
		pthread_mutex_unlock(&m->lock);
		if (j >= m->njobs)
			return NULL;
		int p = j / m->o->seeds, s = j % m->o->seeds;
		struct sim_run_cfg cfg = {
			.policy = m->o->pol[p].id,
			.wl_mode = m->o->pol[p].mode,
			.seed = m->o->seed_base + (uint64_t)s,
			.tune = m->o->tune,
			.trace_wl = m->trace_wl,
			.ties = m->o->ties,
		};
		if (m->o->gangs ? gang_job(m, &cfg, j) : sim_run(m->cl, m->tr, &cfg, &m->res[j])) {
			pthread_mutex_lock(&m->lock);
			m->failed++;
			pthread_mutex_unlock(&m->lock);
		}
	}
}

static int run_matrix(struct matrix *m)
{
	int nthreads = m->o->jobs < m->njobs ? m->o->jobs : m->njobs;
	pthread_t th[64];
	if (nthreads > 64)
		nthreads = 64;
	pthread_mutex_init(&m->lock, NULL);
	int started = 0;
	for (int i = 1; i < nthreads; i++)
		if (!pthread_create(&th[started], NULL, worker, m))
			started++;
	worker(m);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&m->lock);
	return m->failed ? -1 : 0;
}

/* ---- reports ---- */

static void series_of(const struct opts *o, const struct sim_result *res, int p,
		      struct sim_series *out)
{
	double v[MAX_SEEDS];
	out->label = o->pol[p].label;
	for (int b = 0; b < SIM_NBINS; b++) {
		for (int s = 0; s < o->seeds; s++)
			v[s] = 100.0 - res[p * o->seeds + s].alloc[b];
		sim_sort(v, o->seeds);
		out->median[b] = sim_quantile(v, o->seeds, 0.5);
		out->lo[b] = sim_quantile(v, o->seeds, 0.25);
		out->hi[b] = sim_quantile(v, o->seeds, 0.75);
	}
}

static void print_csv(const struct opts *o, const struct sim_result *res)
{
	printf("policy,seed,arrived_pct,allocated_gpu_pct,unallocated_gpu_pct,fragmented_gpu_pct\n");
	for (int p = 0; p < o->npol; p++)
		for (int s = 0; s < o->seeds; s++) {
			const struct sim_result *r = &res[p * o->seeds + s];
			for (int b = 0; b < SIM_NBINS; b++)
				printf("%s,%llu,%d,%.2f,%.2f,%.2f\n", o->pol[p].label,
				       (unsigned long long)(o->seed_base + (uint64_t)s), b, r->alloc[b],
				       100.0 - r->alloc[b], r->frag[b]);
		}
}

static void print_table(const struct opts *o, const struct sim_result *res,
			const struct sim_cluster *cl, const struct sim_trace *tr)
{
	static const int at[] = { 50, 75, 90, 100, 110, 120, 130 };
	int gpus = (int)(cl->gpu_milli / GPU_CORE_FULL);
	printf("# %s: %d pods on %s: %d nodes, %d GPUs; seeds %llu..%llu; tune %.2f; ties %s\n",
	       o->pods, tr->ntask, o->nodes, cl->nnode, gpus,
	       (unsigned long long)o->seed_base,
	       (unsigned long long)(o->seed_base + (uint64_t)o->seeds - 1), o->tune,
	       o->ties == SIM_TIES_RANDOM ? "random" : o->ties == SIM_TIES_FIRST ? "first" : "order");
	printf("# unallocated GPU %% (median over seeds) at arrived workload %%\n");
	printf("%-20s", "policy");
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
		printf(" %6d", at[i]);
	printf(" %8s %12s\n", "failed", "placements/s");
	for (int p = 0; p < o->npol; p++) {
		struct sim_series s;
		series_of(o, res, p, &s);
		printf("%-20s", o->pol[p].label);
		for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
			printf(" %6.2f", s.median[at[i]]);
		double secs = 0, arr = 0, failed = 0;
		for (int k = 0; k < o->seeds; k++) {
			secs += res[p * o->seeds + k].seconds;
			arr += (double)res[p * o->seeds + k].arrivals;
			failed += (double)res[p * o->seeds + k].failed;
		}
		printf(" %8.0f %12.0f\n", failed / o->seeds, secs > 0 ? arr / secs : 0);
	}
}

/* The mean over seeds of one figure; NAN when no seed has it (no gang started). */
static double gang_mean(const struct opts *o, const struct sim_gang_result *g, int p, int h,
			double (*get)(const struct sim_gang_result *))
{
	double sum = 0;
	int n = 0;
	for (int s = 0; s < o->seeds; s++) {
		const struct sim_gang_result *r = &g[(p * o->seeds + s) * GANG_PLACES + h];
		double v = get(r);
		if (!isnan(v)) {
			sum += v;
			n++;
		}
	}
	return n ? sum / n : NAN;
}

static double g_gangs(const struct sim_gang_result *r) { return (double)r->gangs; }
static double g_unalloc(const struct sim_gang_result *r) { return r->unalloc_pct; }
static double g_idle(const struct sim_gang_result *r) { return r->idle_pct; }
static double g_wait(const struct sim_gang_result *r) { return r->started ? r->wait_mean_s / 60 : NAN; }
static double g_p95(const struct sim_gang_result *r) { return r->started ? r->wait_p95_s / 60 : NAN; }
static double g_never(const struct sim_gang_result *r) { return (double)r->never; }
static double g_dead(const struct sim_gang_result *r) { return (double)r->deadlocked; }
static double g_failed(const struct sim_gang_result *r) { return (double)r->failed; }
static double g_jobs(const struct sim_gang_result *r) { return (double)r->jobs; }

static void print_gang_csv(const struct opts *o, const struct sim_gang_result *g)
{
	printf("policy,seed,placement,arrivals,gangs,unallocated_gpu_pct,idle_gpu_pct,wait_mean_min,"
	       "wait_p95_min,gangs_never_started,gangs_deadlocked,tasks_failed\n");
	for (int p = 0; p < o->npol; p++)
		for (int s = 0; s < o->seeds; s++)
			for (int h = 0; h < GANG_PLACES; h++) {
				const struct sim_gang_result *r = &g[(p * o->seeds + s) * GANG_PLACES + h];
				printf("%s,%llu,%s,%ld,%ld,%.2f,%.2f,%.2f,%.2f,%ld,%ld,%ld\n", o->pol[p].label,
				       (unsigned long long)(o->seed_base + (uint64_t)s), GANG_PLACE_NAME[h],
				       r->jobs, r->gangs, r->unalloc_pct, r->idle_pct, r->wait_mean_s / 60,
				       r->wait_p95_s / 60, r->never, r->deadlocked, r->failed);
			}
}

static void print_gang_table(const struct opts *o, const struct sim_gang_result *g,
			     const struct sim_cluster *cl, const struct sim_trace *tr)
{
	const struct sim_gang_cfg *gc = &o->gang;
	printf("# %s: %d pods on %s: %d nodes, %d GPUs; seeds %llu..%llu; tune %.2f; ties %s\n",
	       o->pods, tr->ntask, o->nodes, cl->nnode, (int)(cl->gpu_milli / GPU_CORE_FULL),
	       (unsigned long long)o->seed_base,
	       (unsigned long long)(o->seed_base + (uint64_t)o->seeds - 1), o->tune,
	       o->ties == SIM_TIES_RANDOM ? "random" : o->ties == SIM_TIES_FIRST ? "first" : "order");
	printf("# gangs: %.0f %% of whole-GPU tasks, %d-%d members; offered load %.2f x capacity; "
	       "run time exponential, mean %.0f min\n",
	       gc->fraction * 100, gc->kmin, gc->kmax, gc->load, gc->mean_run_s / 60);
	printf("# mean over seeds; unalloc and idle: %% of GPUs, time average over the second half "
	       "of the arrivals; wait: minutes\n");
	printf("%-16s %-17s %8s %6s %8s %6s %9s %8s %6s %9s %7s\n", "policy", "placement", "arrivals",
	       "gangs", "unalloc%", "idle%", "wait-mean", "wait-p95", "never", "deadlocks", "failed");
	for (int p = 0; p < o->npol; p++)
		for (int h = 0; h < GANG_PLACES; h++) {
			/* No gang started in any seed: no wait to show. */
			char wait[16] = "-", p95[16] = "-";
			double wm = gang_mean(o, g, p, h, g_wait);
			if (!isnan(wm)) {
				snprintf(wait, sizeof(wait), "%.1f", wm);
				snprintf(p95, sizeof(p95), "%.1f", gang_mean(o, g, p, h, g_p95));
			}
			printf("%-16s %-17s %8.0f %6.0f %8.2f %6.2f %9s %8s %6.1f %9.1f %7.0f\n",
			       o->pol[p].label, GANG_PLACE_NAME[h], gang_mean(o, g, p, h, g_jobs),
			       gang_mean(o, g, p, h, g_gangs), gang_mean(o, g, p, h, g_unalloc),
			       gang_mean(o, g, p, h, g_idle), wait, p95, gang_mean(o, g, p, h, g_never),
			       gang_mean(o, g, p, h, g_dead), gang_mean(o, g, p, h, g_failed));
		}
}

static int write_plot(const struct opts *o, const struct sim_result *res)
{
	struct sim_series *s = calloc((size_t)o->npol, sizeof(*s));
	if (!s)
		return -1;
	for (int p = 0; p < o->npol; p++)
		series_of(o, res, p, &s[p]);
	struct buf b;
	buf_init(&b, PLOT_MAX_BYTES);
	char title[256];
	const char *base = strrchr(o->pods, '/');
	if (o->title[0])
		snprintf(title, sizeof(title), "%s", o->title);
	else
		snprintf(title, sizeof(title), "%s (median of %d seeds, band: 25-75%%)",
			 base ? base + 1 : o->pods, o->seeds);
	int rc = sim_plot_svg(&b, title, s, o->npol);
	free(s);
	if (!rc) {
		FILE *f = fopen(o->plot, "w");
		if (!f || fwrite(buf_cstr(&b), 1, b.len, f) != b.len)
			rc = -1;
		if (f && fclose(f))
			rc = -1;
	}
	buf_release(&b);
	if (rc)
		fprintf(stderr, "simulate: cannot write %s\n", o->plot);
	return rc;
}

int sim_main(int argc, char **argv)
{
	struct opts o;
	int prc = parse_args(argc, argv, &o);
	if (prc)
		return prc > 0 ? 0 : 2;
	char err[256];
	struct sim_cluster cl;
	struct sim_trace tr;
	if (sim_read_nodes(o.nodes, &cl, err, sizeof(err))) {
		fprintf(stderr, "simulate: %s\n", err);
		return 1;
	}
	if (sim_read_pods(o.pods, &tr, err, sizeof(err))) {
		fprintf(stderr, "simulate: %s\n", err);
		sim_cluster_release(&cl);
		return 1;
	}
	int rc = 1;
	struct workload *twl = malloc(sizeof(*twl));
	struct sim_result *res = calloc((size_t)o.npol * (size_t)o.seeds, sizeof(*res));
	struct sim_gang_result *gres = calloc((size_t)o.npol * (size_t)o.seeds * GANG_PLACES,
					      sizeof(*gres));
	if (!twl || !res || !gres) {
		fprintf(stderr, "simulate: out of memory\n");
		goto out;
	}
	if (cl.gpu_milli <= 0) {
		fprintf(stderr, "simulate: the node list has no usable GPUs\n");
		goto out;
	}
	sim_trace_workload(&tr, twl);
	struct matrix m = { .o = &o, .cl = &cl, .tr = &tr, .trace_wl = twl, .res = res,
			    .gres = gres, .njobs = o.npol * o.seeds };
	if (run_matrix(&m)) {
		fprintf(stderr, "simulate: out of memory\n");
		goto out;
	}
	if (o.gangs && o.csv)
		print_gang_csv(&o, gres);
	else if (o.gangs)
		print_gang_table(&o, gres, &cl, &tr);
	else if (o.csv)
		print_csv(&o, res);
	else
		print_table(&o, res, &cl, &tr);
	if (o.plot[0] && write_plot(&o, res))
		goto out;
	rc = fflush(stdout) ? 1 : 0;
out:
	free(res);
	free(gres);
	free(twl);
	sim_trace_release(&tr);
	sim_cluster_release(&cl);
	return rc;
}
