/*
 * Gangs in the simulator: a synthetic gang mix on top of a seed's arrivals,
 * and a replay in which tasks run for a while and leave, so that a gang can
 * wait and GPUs can be held while it does (docs/simulation.md, "Gangs").
 *
 * The FGD protocol of replay.c has no time: nothing leaves, so nothing that
 * waits could ever start. Here every arrival (a plain task, or a gang whose
 * members arrive together) gets an arrival time and a run time. A plain
 * task is placed by the policy when it arrives or fails for good, as in
 * replay.c. A gang that cannot start waits, and the waiting gangs are tried
 * again, oldest first, whenever something leaves. Two placements of gangs:
 *
 *   SIM_GANG_AWARE    gang_plan() (the extender's planner): all members at
 *                     once, or none;
 *   SIM_GANG_MEMBERS  each member on its own through the policy, as a pod
 *                     without gang support would be: the members placed
 *                     hold their GPUs, idle, until the last one is placed.
 *
 * A gang runs (its run time starts) once all its members are placed, and
 * all of them leave together.
 */
#include "gang.h"
#include "sim_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the gang mix and the clock ---- */

/* Uniform in [0, 1). */
static double unit(struct sim_rng *r)
{
	return (double)(sim_rng_next(r) >> 11) * 0x1p-53;
}

/* Exponential with that mean. */
static double expo(struct sim_rng *r, double mean)
{
	return -log(1.0 - unit(r)) * mean;
}

static bool whole_gpus(const struct claim *c)
{
	return c->mode == CLAIM_EXCLUSIVE && c->count >= 1;
}

struct sim_job *sim_gang_jobs(const struct sim_trace *tr, int64_t capacity, double tune, uint64_t seed,
			      const struct sim_gang_cfg *g, int *n)
{
	int narr = 0;
	int *order = sim_arrivals(tr, capacity, tune, seed, &narr);
	struct sim_job *jobs = order ? calloc((size_t)narr + 1, sizeof(*jobs)) : NULL;
	if (!jobs) {
		free(order);
		return NULL;
	}
	/*
	 * Two streams of their own, so that the arrival order is the FGD
	 * protocol's and the same gangs come for every policy and placement.
	 * Every whole-GPU arrival draws both numbers, gang or not: a larger
	 * fraction keeps the gangs of a smaller one and adds some.
	 */
	struct sim_rng mix, clock;
	sim_rng_seed(&mix, seed ^ 0x67616e676d697821ULL);
	sim_rng_seed(&clock, seed ^ 0x636c6f636b74696dULL);
	double demand = 0;
	for (int i = 0; i < narr; i++) {
		const struct sim_task *t = &tr->tasks[order[i]];
		jobs[i].task = order[i];
		jobs[i].members = 1;
		if (whole_gpus(&tr->shapes[t->shape])) {
			double u = unit(&mix);
			int k = g->kmin + (int)sim_rng_below(&mix, (uint64_t)(g->kmax - g->kmin + 1));
			if (u < g->fraction)
				jobs[i].members = k;
		}
		demand += (double)jobs[i].members * (double)t->gpu_milli;
	}
	/* Arrivals a Poisson stream at the rate that offers load x capacity. */
	double gap = narr && demand > 0 ?
		demand / narr * g->mean_run_s / (g->load * (double)capacity) : 0;
	double now = 0;
	for (int i = 0; i < narr; i++) {
		jobs[i].arrive = now;
		jobs[i].run = expo(&clock, g->mean_run_s);
		now += expo(&clock, gap);
	}
	free(order);
	*n = narr;
	return jobs;
}

/* ---- the replay ---- */

struct job_state {
	int placed;               /* members placed */
	bool started;
	struct gang_slot *slots;  /* where the placed members are; owned */
};

struct dep {
	double t;
	int job;
};

struct replay {
	const struct sim_trace *tr;
	const struct sim_job *jobs;
	enum sim_gang_place how;
	struct sim_placer pl;
	struct job_state *st;
	struct dep *heap;         /* departures, earliest first */
	int nheap;
	int *queue;               /* waiting gangs, in arrival order */
	int nqueue;
	double *waits;            /* of the gangs started */
	int nwait;
	int *node_free;           /* whole GPUs no one holds, per node */
	struct gpu_node **cand;   /* the nodes handed to gang_plan() */
	int *cand_node;           /* and their indices */
	int64_t free_whole;       /* their sum: a cheap bound before planning */
	/*
	 * Per claim shape: the round it last failed in and the fewest members
	 * that failed. A round lasts from one departure to the next: room only
	 * shrinks meanwhile, so what failed fails again.
	 */
	int *blocked_round;
	int *blocked_k;
	int round;
	double t, w0, w1;         /* now; the measuring window */
	double alloc, idle;       /* milli-GPU allocated, and held by partly placed gangs */
	double alloc_int, idle_int;   /* their integrals over the window */
	struct sim_gang_result *out;
};

static const struct claim *job_claim(const struct replay *r, int j)
{
	return &r->tr->shapes[r->tr->tasks[r->jobs[j].task].shape];
}

static double job_milli(const struct replay *r, int j)
{
	return (double)r->tr->tasks[r->jobs[j].task].gpu_milli;
}

static int free_devices(const struct gpu_node *n)
{
	int k = 0;
	for (int d = 0; d < n->ndev; d++) {
		const struct gpu_device *dev = &n->dev[d];
		k += gpu_usable(dev) && !dev->exclusive && !dev->shared && !dev->used_core;
	}
	return k;
}

static void recount(struct replay *r, int node)
{
	int k = free_devices(r->pl.nodes[node]);
	r->free_whole += k - r->node_free[node];
	r->node_free[node] = k;
}

/* Moves the clock to t, adding the time since the last event to the integrals. */
static void advance(struct replay *r, double t)
{
	double lo = r->t > r->w0 ? r->t : r->w0, hi = t < r->w1 ? t : r->w1;
	if (hi > lo) {
		r->alloc_int += r->alloc * (hi - lo);
		r->idle_int += r->idle * (hi - lo);
	}
	r->t = t;
}

/* What job j holds without running: a gang partly placed. */
static double held_idle(const struct replay *r, int j)
{
	const struct job_state *s = &r->st[j];
	return r->jobs[j].members > 1 && !s->started && s->placed ? s->placed * job_milli(r, j) : 0;
}

static void heap_push(struct replay *r, double t, int job)
{
	int i = r->nheap++;
	while (i > 0) {
		int up = (i - 1) / 2;
		if (r->heap[up].t < t || (r->heap[up].t == t && r->heap[up].job < job))
			break;
		r->heap[i] = r->heap[up];
		i = up;
	}
	r->heap[i] = (struct dep){ t, job };
}

static struct dep heap_pop(struct replay *r)
{
	struct dep top = r->heap[0], last = r->heap[--r->nheap];
	int i = 0;
	for (;;) {
		int c = 2 * i + 1;
		if (c >= r->nheap)
			break;
		if (c + 1 < r->nheap && (r->heap[c + 1].t < r->heap[c].t ||
					 (r->heap[c + 1].t == r->heap[c].t && r->heap[c + 1].job < r->heap[c].job)))
			c++;
		if (last.t < r->heap[c].t || (last.t == r->heap[c].t && last.job < r->heap[c].job))
			break;
		r->heap[i] = r->heap[c];
		i = c;
	}
	r->heap[i] = last;
	return top;
}

static void place(struct replay *r, int j, int node, const struct fit *f)
{
	struct job_state *s = &r->st[j];
	sim_placer_apply(&r->pl, node, job_claim(r, j), f);
	recount(r, node);
	s->slots[s->placed].node = node;
	s->slots[s->placed].fit = *f;
	s->placed++;
	r->alloc += job_milli(r, j);
}

static void start(struct replay *r, int j)
{
	const struct sim_job *job = &r->jobs[j];
	r->st[j].started = true;
	heap_push(r, r->t + job->run, j);
	if (job->members > 1) {
		r->waits[r->nwait++] = r->t - job->arrive;
		r->out->started++;
	}
}

/* Whether the gang's claim already failed this round for as few members. */
static bool blocked(const struct replay *r, int shape, int k)
{
	return r->blocked_round[shape] == r->round && r->blocked_k[shape] <= k;
}

static void block(struct replay *r, int shape, int k)
{
	if (r->blocked_round[shape] != r->round || r->blocked_k[shape] > k)
		r->blocked_k[shape] = k;
	r->blocked_round[shape] = r->round;
}

/* False when k members of c cannot fit, by the count of free whole GPUs alone. */
static bool room_for(const struct replay *r, const struct claim *c, int k)
{
	return !whole_gpus(c) || (int64_t)k * c->count <= r->free_whole;
}

/*
 * Tries to start gang j, placed as r->how says; false while it must wait.
 * A claim that failed this round fails again (for at least as many members
 * in gang_plan: it counts the places on every node). -1: out of memory.
 */
static int try_gang(struct replay *r, int j)
{
	const struct sim_job *job = &r->jobs[j];
	struct job_state *s = &r->st[j];
	const struct claim *c = job_claim(r, j);
	int shape = r->tr->tasks[job->task].shape;
	if (r->how == SIM_GANG_AWARE) {
		if (blocked(r, shape, job->members) || !room_for(r, c, job->members)) {
			block(r, shape, job->members);
			return 0;
		}
		/*
		 * The planner tries every node it is given; give it only those a
		 * member fits on now (their order kept, so the plan is the same).
		 */
		int ncand = 0;
		long bound = 0;
		for (int i = 0; i < r->pl.nn; i++) {
			if (whole_gpus(c) && r->node_free[i] < c->count)
				continue;
			if (!fit_possible(r->pl.nodes[i], c))
				continue;
			r->cand[ncand] = r->pl.nodes[i];
			r->cand_node[ncand++] = i;
			bound += whole_gpus(c) ? r->node_free[i] / c->count : job->members;
		}
		struct gang_plan plan = { .ok = false };
		if (bound >= job->members &&
		    gang_plan((const struct gpu_node *const *)r->cand, ncand, c, job->members, NULL, &plan))
			return -1;
		if (!plan.ok) {
			block(r, shape, job->members);
			return 0;
		}
		for (int k = 0; k < plan.nslots; k++)
			place(r, j, r->cand_node[plan.slots[k].node], &plan.slots[k].fit);
		gang_plan_release(&plan);
	} else {
		double before = held_idle(r, j);
		while (s->placed < job->members) {
			struct fit f;
			int node = blocked(r, shape, 1) || !room_for(r, c, 1) ? -1 :
				sim_placer_pick(&r->pl, shape, c, &f);
			if (node < 0) {
				block(r, shape, 1);
				break;
			}
			place(r, j, node, &f);
		}
		if (s->placed < job->members) {
			r->idle += held_idle(r, j) - before;
			return 0;
		}
		r->idle -= before;   /* it runs now: nothing it holds is idle */
	}
	start(r, j);
	return 1;
}

static int arrive(struct replay *r, int j)
{
	const struct sim_job *job = &r->jobs[j];
	struct job_state *s = &r->st[j];
	const struct claim *c = job_claim(r, j);
	s->slots = calloc((size_t)job->members, sizeof(*s->slots));
	if (!s->slots)
		return -1;
	int rc = 1;
	if (job->members == 1) {
		struct fit f;
		int node = sim_placer_pick(&r->pl, r->tr->tasks[job->task].shape, c, &f);
		if (node >= 0) {
			place(r, j, node, &f);
			start(r, j);
		} else {
			r->out->failed++;
			free(s->slots);
			s->slots = NULL;
		}
	} else {
		r->out->gangs++;
		rc = try_gang(r, j);
		if (rc == 0)
			r->queue[r->nqueue++] = j;
	}
	for (int k = 0; k < job->members; k++)
		sim_placer_observe(&r->pl, c);
	return rc < 0 ? -1 : 0;
}

/* Job j leaves: its members free their places, and the waiting gangs try again. */
static int depart(struct replay *r, int j)
{
	struct job_state *s = &r->st[j];
	const struct claim *c = job_claim(r, j);
	for (int k = 0; k < s->placed; k++) {
		sim_placer_unapply(&r->pl, s->slots[k].node, c, &s->slots[k].fit);
		recount(r, s->slots[k].node);
		r->alloc -= job_milli(r, j);
	}
	s->placed = 0;
	free(s->slots);
	s->slots = NULL;
	r->round++;
	int kept = 0;
	for (int q = 0; q < r->nqueue; q++) {
		int g = r->queue[q], rc = try_gang(r, g);
		if (rc < 0)
			return -1;
		if (!rc)
			r->queue[kept++] = g;
	}
	r->nqueue = kept;
	return 0;
}

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The replay's arrays for n jobs on cl; -1 when out of memory (replay_release frees what came). */
static int replay_alloc(struct replay *r, const struct sim_cluster *cl, int n)
{
	r->st = calloc((size_t)n + 1, sizeof(*r->st));
	r->heap = malloc(((size_t)n + 1) * sizeof(*r->heap));
	r->queue = malloc(((size_t)n + 1) * sizeof(*r->queue));
	r->waits = malloc(((size_t)n + 1) * sizeof(*r->waits));
	r->node_free = calloc((size_t)cl->nnode, sizeof(*r->node_free));
	r->cand = calloc((size_t)cl->nnode + 1, sizeof(*r->cand));
	r->cand_node = calloc((size_t)cl->nnode + 1, sizeof(*r->cand_node));
	r->blocked_round = calloc((size_t)r->tr->nshape + 1, sizeof(*r->blocked_round));
	r->blocked_k = calloc((size_t)r->tr->nshape + 1, sizeof(*r->blocked_k));
	if (!r->st || !r->heap || !r->queue || !r->waits || !r->node_free || !r->cand || !r->cand_node ||
	    !r->blocked_round || !r->blocked_k)
		return -1;
	return 0;
}

static void replay_release(struct replay *r, int n)
{
	if (r->st)
		for (int i = 0; i < n; i++)
			free(r->st[i].slots);
	free(r->st);
	free(r->heap);
	free(r->queue);
	free(r->waits);
	free(r->node_free);
	free(r->cand);
	free(r->cand_node);
	free(r->blocked_round);
	free(r->blocked_k);
	sim_placer_release(&r->pl);
}

/* The figures of a finished replay of n jobs into r->out (its seconds are the caller's). */
static void summarize(struct replay *r, const struct sim_cluster *cl, int n)
{
	struct sim_gang_result *out = r->out;
	out->jobs = n;
	out->end_s = r->t;
	/* What still waits never starts: nothing is left to run and leave. */
	out->never = r->nqueue;
	for (int q = 0; q < r->nqueue; q++)
		out->deadlocked += r->st[r->queue[q]].placed > 0;
	double cap = (double)cl->gpu_milli, span = r->w1 - r->w0;
	if (span > 0) {
		out->unalloc_pct = 100.0 - r->alloc_int / span * 100.0 / cap;
		out->idle_pct = r->idle_int / span * 100.0 / cap;
	}
	if (r->nwait) {
		double sum = 0;
		for (int i = 0; i < r->nwait; i++)
			sum += r->waits[i];
		out->wait_mean_s = sum / r->nwait;
		sim_sort(r->waits, r->nwait);
		out->wait_p95_s = sim_quantile(r->waits, r->nwait, 0.95);
	}
}

int sim_gang_run(const struct sim_cluster *cl, const struct sim_trace *tr, const struct sim_job *jobs,
		 int n, const struct sim_run_cfg *cfg, enum sim_gang_place how,
		 struct sim_gang_result *out)
{
	memset(out, 0, sizeof(*out));
	struct replay r = { .tr = tr, .jobs = jobs, .how = how, .out = out };
	int rc = -1;
	if (sim_placer_init(&r.pl, cl, tr, cfg))
		return -1;
	if (replay_alloc(&r, cl, n))
		goto out;
	for (int i = 0; i < cl->nnode; i++)
		recount(&r, i);
	r.round = 1;
	/* Measured over the second half of the arrivals: the cluster has filled up by then. */
	if (n > 0) {
		r.w1 = jobs[n - 1].arrive;
		r.w0 = (jobs[0].arrive + r.w1) / 2;
		r.t = jobs[0].arrive;
	}
	double t0 = wall();
	int a = 0;
	while (a < n || r.nheap) {
		/* A departure first when both come at once: it frees room for the arrival. */
		if (r.nheap && (a == n || r.heap[0].t <= jobs[a].arrive)) {
			struct dep d = heap_pop(&r);
			advance(&r, d.t);
			if (depart(&r, d.job))
				goto out;
		} else {
			advance(&r, jobs[a].arrive);
			if (arrive(&r, a++))
				goto out;
		}
	}
	out->seconds = wall() - t0;
	summarize(&r, cl, n);
	rc = 0;
out:
	replay_release(&r, n);
	return rc;
}
