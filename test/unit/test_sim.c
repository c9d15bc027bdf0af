/* The simulator: trace readers, arrivals, the memoised replay, the plot. */
#include "testutil.h"

#include "sim_impl.h"
#include "policy.h"
#include "workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *const NODES =
	"sn,cpu_milli,memory_mib,gpu,model\n"
	"n0,96000,393216,8,G2\n"
	"n1,104000,524288,2,T4\n"
	"n2,16000,122880,2,P100\n"
	"n3,32000,131072,4,V100M16\n"
	"n4,96000,393216,8,G2\n"
	"n5,104000,524288,2,T4\r\n"
	"n6,8000,32768,1,V100M16\n"
	"n7,128000,786432,8,G3\n";

static const char *const PODS =
	"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
	"p0,3152,8192,1,810,,LS\n"
	"p1,11300,40960,1,1000,,LS\n"
	"p2,12500,20480,0,0,,LS\n"
	"p3,8000,30720,1,470,,LS\n"
	"p4,64200,263168,8,1000,,BE\n"
	"p5,11908,40960,1,470,,LS\n"
	"p6,3152,8192,1,810,,LS\n"
	"p7,16000,65536,2,1000,V100M16|V100M32,LS\n"
	"p8,4000,12288,1,320,T4,LS\n"
	"p9,32000,65536,0,0,,LS\n"
	"p10,18708,73728,1,1000,,LS\n"
	"p11,4000,8192,1,230,,LS\n";

static void load(struct sim_cluster *cl, struct sim_trace *tr)
{
	char err[256];
	assert_int_equal(sim_parse_nodes(NODES, cl, err, sizeof(err)), 0);
	assert_int_equal(sim_parse_pods(PODS, tr, err, sizeof(err)), 0);
}

static void test_read_nodes(void **state)
{
	(void)state;
	struct sim_cluster cl;
	char err[256];
	assert_int_equal(sim_parse_nodes(NODES, &cl, err, sizeof(err)), 0);
	assert_int_equal(cl.nnode, 8);
	assert_int_equal(cl.gpu_milli, 35000);
	assert_string_equal(cl.nodes[1]->name, "n1");
	assert_int_equal(cl.nodes[1]->ndev, 2);
	assert_string_equal(cl.nodes[1]->info[1].model, "T4");
	assert_int_equal(cl.nodes[7]->cpu_cap, 128000);
	assert_int_equal(cl.nodes[5]->mem_cap, 524288);   /* CRLF line */
	sim_cluster_release(&cl);
	/* Columns by name, in any order; CPU-only nodes are nodes too. */
	assert_int_equal(sim_parse_nodes("model,gpu,sn,memory_mib,cpu_milli\n,0,c0,1024,2000\nA10,1,g0,1024,2000\n",
					 &cl, err, sizeof(err)), 0);
	assert_int_equal(cl.nnode, 2);
	assert_int_equal(cl.gpu_milli, 1000);
	sim_cluster_release(&cl);
	assert_int_equal(sim_parse_nodes("sn,cpu_milli,memory_mib,gpu\nx,1,1,1\n", &cl, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "model"));
	assert_int_equal(sim_parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nx,12a,1,1,T4\n", &cl, err,
					 sizeof(err)), -1);
	assert_non_null(strstr(err, "line 2"));
	assert_int_equal(sim_parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nx,1,1,65,T4\n", &cl, err,
					 sizeof(err)), -1);
	assert_int_equal(sim_parse_nodes("", &cl, err, sizeof(err)), -1);
}

/* The standalone inventory (a Kubernetes List) works as a node list too. */
static void test_read_inventory(void **state)
{
	(void)state;
	static const char *const inv =
		"{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n"
		" {\"apiVersion\": \"v1\", \"kind\": \"Node\", \"metadata\": {\"name\": \"a\"},\n"
		"  \"status\": {\"allocatable\": {\"cpu\": \"16\", \"memory\": \"64Gi\"}}},\n"
		" {\"apiVersion\": \"gpu.scheduling/v1\", \"kind\": \"GpuNodeStatus\",\n"
		"  \"metadata\": {\"name\": \"a\"}, \"spec\": {\"nodeName\": \"a\"},\n"
		"  \"status\": {\"devices\": [\n"
		"   {\"id\": 0, \"vendor\": \"nvidia\", \"model\": \"T4\", \"memoryMiB\": 15360, \"health\": \"Healthy\"},\n"
		"   {\"id\": 1, \"vendor\": \"nvidia\", \"model\": \"T4\", \"memoryMiB\": 15360, \"health\": \"Healthy\"}]}}]}\n";
	char path[] = "/tmp/test_sim_inv_XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "w");
	assert_non_null(f);
	fputs(inv, f);
	fclose(f);
	struct sim_cluster cl;
	char err[256];
	int rc = sim_read_nodes(path, &cl, err, sizeof(err));
	unlink(path);
	assert_int_equal(rc, 0);
	assert_int_equal(cl.nnode, 1);
	assert_int_equal(cl.gpu_milli, 2000);
	assert_int_equal(cl.nodes[0]->ndev, 2);
	assert_string_equal(cl.nodes[0]->info[1].model, "T4");
	sim_cluster_release(&cl);
	assert_int_equal(sim_read_nodes("/nonexistent/nodes.csv", &cl, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "cannot open"));
}

static void test_read_pods(void **state)
{
	(void)state;
	struct sim_trace tr;
	char err[256];
	assert_int_equal(sim_parse_pods(PODS, &tr, err, sizeof(err)), 0);
	assert_int_equal(tr.ntask, 12);
	/* p0 and p6 are the same claim. */
	assert_int_equal(tr.tasks[0].shape, tr.tasks[6].shape);
	assert_int_equal(tr.nshape, 11);
	const struct claim *c = &tr.shapes[tr.tasks[0].shape];
	assert_int_equal(c->mode, CLAIM_SHARED);
	assert_int_equal(c->core, 810);
	assert_int_equal(c->mem_mib, 0);
	assert_int_equal(c->cpu_milli, 3152);
	c = &tr.shapes[tr.tasks[4].shape];
	assert_int_equal(c->mode, CLAIM_EXCLUSIVE);
	assert_int_equal(c->count, 8);
	assert_int_equal(tr.tasks[4].gpu_milli, 8000);
	c = &tr.shapes[tr.tasks[2].shape];
	assert_false(claim_wants_gpu(c));
	assert_int_equal(c->mem_mib_host, 20480);
	assert_string_equal(tr.shapes[tr.tasks[7].shape].models, "V100M16|V100M32");
	assert_int_equal(tr.gpu_milli, 810 * 2 + 1000 + 470 * 2 + 8000 + 2000 + 320 + 1000 + 230);
	sim_trace_release(&tr);
	/* The multigpu files have five columns. */
	assert_int_equal(sim_parse_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,500\n", &tr, err,
					sizeof(err)), 0);
	sim_trace_release(&tr);
	assert_int_equal(sim_parse_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,2,500\n", &tr, err,
					sizeof(err)), -1);
	assert_non_null(strstr(err, "share"));
	assert_int_equal(sim_parse_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,1001\n", &tr, err,
					sizeof(err)), -1);
}

static void test_rng(void **state)
{
	(void)state;
	struct sim_rng a, b;
	sim_rng_seed(&a, 42);
	sim_rng_seed(&b, 42);
	for (int i = 0; i < 100; i++)
		assert_true(sim_rng_next(&a) == sim_rng_next(&b));
	int hist[7] = { 0 };
	for (int i = 0; i < 70000; i++) {
		uint64_t v = sim_rng_below(&a, 7);
		assert_true(v < 7);
		hist[v]++;
	}
	for (int i = 0; i < 7; i++)
		assert_true(hist[i] > 9000 && hist[i] < 11000);
}

static void test_arrivals(void **state)
{
	(void)state;
	struct sim_cluster cl;
	struct sim_trace tr;
	load(&cl, &tr);
	int n, n2;
	int *a = sim_arrivals(&tr, cl.gpu_milli, 1.3, 42, &n);
	int *b = sim_arrivals(&tr, cl.gpu_milli, 1.3, 42, &n2);
	int *c = sim_arrivals(&tr, cl.gpu_milli, 1.3, 43, &n2);
	assert_non_null(a);
	/* The whole trace first, shuffled, then copies until 130 % of capacity. */
	int seen[12] = { 0 };
	for (int i = 0; i < tr.ntask; i++)
		seen[a[i]]++;
	for (int i = 0; i < tr.ntask; i++)
		assert_int_equal(seen[i], 1);
	double demand = 0, before_last = 0;
	for (int i = 0; i < n; i++) {
		before_last = demand;
		demand += (double)tr.tasks[a[i]].gpu_milli;
	}
	assert_true(demand >= 1.3 * (double)cl.gpu_milli);
	assert_true(before_last < 1.3 * (double)cl.gpu_milli);
	assert_memory_equal(a, b, (size_t)n * sizeof(int));
	assert_memory_not_equal(a, c, (size_t)tr.ntask * sizeof(int));
	free(a);
	free(b);
	free(c);
	/* More demand than the target: random tasks are dropped. */
	a = sim_arrivals(&tr, cl.gpu_milli, 0.3, 42, &n);
	demand = 0;
	for (int i = 0; i < n; i++)
		demand += (double)tr.tasks[a[i]].gpu_milli;
	assert_true(n < tr.ntask && demand <= 0.3 * (double)cl.gpu_milli);
	free(a);
	sim_trace_release(&tr);
	sim_cluster_release(&cl);
}

/*
 * The memoised replay places exactly what a plain loop over policy_place()
 * would (first best node wins), for deterministic and workload policies.
 */
static void check_replay_matches_plain_loop(enum policy_id id, enum sim_wl_mode mode)
{
	struct sim_cluster cl;
	struct sim_trace tr;
	load(&cl, &tr);
	struct workload *twl = malloc(sizeof(*twl)), *own = malloc(sizeof(*own));
	assert_non_null(twl);
	assert_non_null(own);
	sim_trace_workload(&tr, twl);
	workload_init(own, true);
	struct sim_run_cfg cfg = { .policy = id, .wl_mode = mode, .seed = 5, .tune = 1.3,
				   .trace_wl = twl, .ties = SIM_TIES_FIRST };
	struct sim_result *r = calloc(1, sizeof(*r));
	assert_non_null(r);
	assert_int_equal(sim_run(&cl, &tr, &cfg, r), 0);

	int n;
	int *order = sim_arrivals(&tr, cl.gpu_milli, 1.3, 5, &n);
	struct gpu_node *nodes[8];
	for (int i = 0; i < cl.nnode; i++)
		nodes[i] = gpu_node_clone(cl.nodes[i]);
	struct policy_ctx ctx = { .id = id, .wl = mode == SIM_WL_ONLINE ? own : twl };
	long placed = 0;
	double allocated = 0;
	for (int a = 0; a < n; a++) {
		const struct claim *c = &tr.shapes[tr.tasks[order[a]].shape];
		int win = -1;
		double best = -INFINITY;
		struct fit f, fw;
		for (int i = 0; i < cl.nnode; i++) {
			double s;
			if (policy_place(&ctx, nodes[i], c, &f, &s) && s > best) {
				best = s;
				win = i;
				fw = f;
			}
		}
		if (win >= 0) {
			fit_apply(nodes[win], c, &fw);
			placed++;
			allocated += (double)claim_gpu_milli(c);
		}
		if (mode == SIM_WL_ONLINE)
			workload_observe(own, c);
	}
	assert_int_equal(r->arrivals, n);
	assert_int_equal(r->placed, placed);
	assert_int_equal(r->failed, n - placed);
	assert_true(fabs(r->alloc[SIM_MAX_PCT] - allocated * 100.0 / (double)cl.gpu_milli) < 1e-9 ||
		    r->alloc[SIM_MAX_PCT] <= allocated * 100.0 / (double)cl.gpu_milli);
	/* Allocation only grows, and never past what arrived. */
	for (int b = 1; b < SIM_NBINS; b++)
		assert_true(r->alloc[b] >= r->alloc[b - 1] - 1e-9 && r->alloc[b] <= b + 0.5 + 1e-9);
	for (int i = 0; i < cl.nnode; i++)
		gpu_node_free(nodes[i]);
	free(order);
	free(r);
	free(twl);
	free(own);
	sim_trace_release(&tr);
	sim_cluster_release(&cl);
}

static void test_replay_matches_plain_loop(void **state)
{
	(void)state;
	check_replay_matches_plain_loop(POLICY_BESTFIT, SIM_WL_ONLINE);
	check_replay_matches_plain_loop(POLICY_BINPACK, SIM_WL_ONLINE);
	check_replay_matches_plain_loop(POLICY_CLUSTERING, SIM_WL_ONLINE);
	check_replay_matches_plain_loop(POLICY_FGD, SIM_WL_TRACE);
	check_replay_matches_plain_loop(POLICY_FGD, SIM_WL_ONLINE);
	check_replay_matches_plain_loop(POLICY_FGD_BALANCED, SIM_WL_ONLINE);
}

/* Same seed, same result, whatever the tie rule; random policy included. */
static void test_replay_is_reproducible(void **state)
{
	(void)state;
	struct sim_cluster cl;
	struct sim_trace tr;
	load(&cl, &tr);
	struct workload *twl = malloc(sizeof(*twl));
	assert_non_null(twl);
	sim_trace_workload(&tr, twl);
	struct sim_result *a = calloc(2, sizeof(*a));
	assert_non_null(a);
	for (int ties = 0; ties < 3; ties++) {
		for (int id = 0; id < POLICY_COUNT; id++) {
			struct sim_run_cfg cfg = { .policy = (enum policy_id)id, .seed = 9, .tune = 1.3,
						   .trace_wl = twl, .ties = (enum sim_ties)ties };
			assert_int_equal(sim_run(&cl, &tr, &cfg, &a[0]), 0);
			assert_int_equal(sim_run(&cl, &tr, &cfg, &a[1]), 0);
			assert_memory_equal(a[0].alloc, a[1].alloc, sizeof(a[0].alloc));
			assert_memory_equal(a[0].frag, a[1].frag, sizeof(a[0].frag));
			assert_int_equal(a[0].placed + a[0].failed, a[0].arrivals);
		}
	}
	free(a);
	free(twl);
	sim_trace_release(&tr);
	sim_cluster_release(&cl);
}

/*
 * Gangs: three nodes of 4 GPUs. Two plain tasks take n0 (4 GPUs, leaves at
 * 50 s) and half of n1 (2 GPUs, leaves at 60 s); gang A (3 x 4 GPUs)
 * arrives at 1 s, gang B (3 x 2 GPUs) at 2 s; a CPU-only task at 1000 s
 * ends the arrivals (the figures are measured over 500..1000 s).
 *
 * Member by member, A takes n2 and, at 50 s, n0; B takes the rest of n1
 * and, at 60 s, the 2 GPUs freed there. Then all 12 GPUs are held and
 * neither gang can ever run: a deadlock. Gang-aware, A cannot start at
 * 1 s (one node has 4 free GPUs), B starts at once (n2 takes two members,
 * n1 one), and A starts when B leaves at 102 s.
 */
static const char *const GANG_NODES =
	"sn,cpu_milli,memory_mib,gpu,model\n"
	"n0,64000,262144,4,V100\n"
	"n1,64000,262144,4,V100\n"
	"n2,64000,262144,4,V100\n";
static const char *const GANG_PODS =
	"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
	"four,1000,1024,4,1000\n"
	"two,1000,1024,2,1000\n"
	"cpu,1000,1024,0,0\n";

static void test_gang_deadlock(void **state)
{
	(void)state;
	struct sim_cluster cl;
	struct sim_trace tr;
	char err[256];
	assert_int_equal(sim_parse_nodes(GANG_NODES, &cl, err, sizeof(err)), 0);
	assert_int_equal(sim_parse_pods(GANG_PODS, &tr, err, sizeof(err)), 0);
	static const struct sim_job jobs[] = {
		{ .task = 0, .members = 1, .arrive = 0, .run = 50 },
		{ .task = 1, .members = 1, .arrive = 0, .run = 60 },
		{ .task = 0, .members = 3, .arrive = 1, .run = 3600 },   /* A */
		{ .task = 1, .members = 3, .arrive = 2, .run = 100 },    /* B */
		{ .task = 2, .members = 1, .arrive = 1000, .run = 10 },
	};
	struct sim_run_cfg cfg = { .policy = POLICY_BINPACK, .wl_mode = SIM_WL_ONLINE, .seed = 1,
				   .tune = 1.3, .ties = SIM_TIES_FIRST };
	struct sim_gang_result m, g;
	assert_int_equal(sim_gang_run(&cl, &tr, jobs, 5, &cfg, SIM_GANG_MEMBERS, &m), 0);
	assert_int_equal(sim_gang_run(&cl, &tr, jobs, 5, &cfg, SIM_GANG_AWARE, &g), 0);

	assert_int_equal(m.jobs, 5);
	assert_int_equal(m.gangs, 2);
	assert_int_equal(m.started, 0);
	assert_int_equal(m.never, 2);
	assert_int_equal(m.deadlocked, 2);
	assert_int_equal(m.failed, 0);
	/* Every GPU held, none of them running anything. */
	assert_true(fabs(m.unalloc_pct) < 1e-9);
	assert_true(fabs(m.idle_pct - 100) < 1e-9);
	assert_true(m.wait_mean_s == 0 && m.wait_p95_s == 0);
	assert_true(fabs(m.end_s - 1010) < 1e-9);

	assert_int_equal(g.gangs, 2);
	assert_int_equal(g.started, 2);
	assert_int_equal(g.never, 0);
	assert_int_equal(g.deadlocked, 0);
	assert_int_equal(g.failed, 0);
	assert_true(fabs(g.unalloc_pct) < 1e-9);   /* A runs on all 12 */
	assert_true(g.idle_pct == 0);
	assert_true(fabs(g.wait_mean_s - 50.5) < 1e-9);   /* B 0 s, A 101 s */
	assert_true(fabs(g.wait_p95_s - 0.95 * 101) < 1e-9);
	assert_true(fabs(g.end_s - 3702) < 1e-9);
	sim_trace_release(&tr);
	sim_cluster_release(&cl);
}

/* The gang mix: whole-GPU tasks only, sizes in range, nested as the fraction grows. */
static void test_gang_mix(void **state)
{
	(void)state;
	struct sim_cluster cl;
	struct sim_trace tr;
	load(&cl, &tr);
	struct sim_gang_cfg lo = { .fraction = 0.3, .kmin = 2, .kmax = 5, .load = 1, .mean_run_s = 3600 };
	struct sim_gang_cfg hi = lo, none = lo, all = lo;
	hi.fraction = 0.6;
	none.fraction = 0;
	all.fraction = 1;
	int n[5];
	struct sim_job *a = sim_gang_jobs(&tr, cl.gpu_milli, 3, 7, &lo, &n[0]);
	struct sim_job *b = sim_gang_jobs(&tr, cl.gpu_milli, 3, 7, &hi, &n[1]);
	struct sim_job *z = sim_gang_jobs(&tr, cl.gpu_milli, 3, 7, &none, &n[2]);
	struct sim_job *w = sim_gang_jobs(&tr, cl.gpu_milli, 3, 7, &all, &n[3]);
	struct sim_job *a2 = sim_gang_jobs(&tr, cl.gpu_milli, 3, 7, &lo, &n[4]);
	assert_true(a && b && z && w && a2);
	int arr;
	int *order = sim_arrivals(&tr, cl.gpu_milli, 3, 7, &arr);
	assert_non_null(order);
	assert_int_equal(n[0], arr);
	assert_memory_equal(a, a2, (size_t)arr * sizeof(*a));   /* one seed, one mix */
	int gangs = 0, whole = 0;
	for (int i = 0; i < arr; i++) {
		const struct claim *c = &tr.shapes[tr.tasks[order[i]].shape];
		bool wg = c->mode == CLAIM_EXCLUSIVE;
		assert_int_equal(a[i].task, order[i]);   /* the FGD protocol's order */
		assert_int_equal(z[i].members, 1);
		assert_int_equal(w[i].members > 1, wg);
		if (!wg)
			assert_int_equal(a[i].members, 1);
		if (a[i].members > 1) {
			assert_true(a[i].members >= 2 && a[i].members <= 5);
			assert_int_equal(b[i].members, a[i].members);   /* kept at a higher fraction */
			assert_int_equal(w[i].members, a[i].members);
			gangs++;
		}
		whole += wg;
		assert_true(a[i].run > 0);
		if (i)
			assert_true(a[i].arrive >= a[i - 1].arrive);
	}
	assert_true(gangs > 0 && gangs < whole);
	free(order);
	free(a);
	free(a2);
	free(b);
	free(z);
	free(w);
	sim_trace_release(&tr);
	sim_cluster_release(&cl);
}

/* On a trace: gang-aware never holds a GPU idle or deadlocks; without gangs both agree. */
static void test_gang_replay_trace(void **state)
{
	(void)state;
	struct sim_cluster cl;
	struct sim_trace tr;
	load(&cl, &tr);
	for (int id = 0; id < POLICY_COUNT; id++) {
		struct sim_run_cfg cfg = { .policy = (enum policy_id)id, .seed = 3, .tune = 1.3 };
		struct sim_gang_cfg gc = { .fraction = 0.5, .kmin = 2, .kmax = 4, .load = 1.2, .mean_run_s = 3600 };
		struct sim_gang_result g, m;
		int n;
		struct sim_job *jobs = sim_gang_jobs(&tr, cl.gpu_milli, 5, 3, &gc, &n);
		assert_non_null(jobs);
		assert_int_equal(sim_gang_run(&cl, &tr, jobs, n, &cfg, SIM_GANG_AWARE, &g), 0);
		assert_int_equal(sim_gang_run(&cl, &tr, jobs, n, &cfg, SIM_GANG_MEMBERS, &m), 0);
		assert_true(g.gangs > 0 && g.gangs == m.gangs);
		assert_true(g.idle_pct == 0 && g.deadlocked == 0);
		assert_int_equal(g.started + g.never, g.gangs);
		assert_int_equal(m.started + m.never, m.gangs);
		assert_true(m.deadlocked <= m.never);
		assert_true(g.unalloc_pct >= 0 && g.unalloc_pct <= 100);
		assert_true(m.unalloc_pct + m.idle_pct <= 100 + 1e-9);
		assert_true(g.wait_p95_s >= 0 && m.wait_mean_s >= 0);
		free(jobs);
		/* No gangs: the two placements are the same replay. */
		gc.fraction = 0;
		jobs = sim_gang_jobs(&tr, cl.gpu_milli, 5, 3, &gc, &n);
		assert_non_null(jobs);
		assert_int_equal(sim_gang_run(&cl, &tr, jobs, n, &cfg, SIM_GANG_AWARE, &g), 0);
		assert_int_equal(sim_gang_run(&cl, &tr, jobs, n, &cfg, SIM_GANG_MEMBERS, &m), 0);
		assert_int_equal(g.failed, m.failed);
		assert_true(g.unalloc_pct == m.unalloc_pct && g.end_s == m.end_s);
		free(jobs);
	}
	sim_trace_release(&tr);
	sim_cluster_release(&cl);
}

static void test_plot(void **state)
{
	(void)state;
	struct sim_series *s = calloc(2, sizeof(*s));
	assert_non_null(s);
	s[0].label = "fgd";
	s[1].label = "a<b&c";
	for (int b = 0; b < SIM_NBINS; b++) {
		s[0].median[b] = s[0].lo[b] = s[0].hi[b] = b < 95 ? 100 - b : 5;
		s[1].median[b] = s[1].lo[b] = s[1].hi[b] = b < 90 ? 100 - b : 10;
	}
	struct buf b;
	buf_init(&b, 1 << 20);
	assert_int_equal(sim_plot_svg(&b, "t & t", s, 2), 0);
	const char *svg = buf_cstr(&b);
	assert_true(!strncmp(svg, "<svg", 4));
	assert_non_null(strstr(svg, "a&lt;b&amp;c"));
	assert_non_null(strstr(svg, "t &amp; t"));
	assert_non_null(strstr(svg, "</svg>"));
	buf_release(&b);
	/* A tiny cap fails cleanly. */
	buf_init(&b, 100);
	assert_int_not_equal(sim_plot_svg(&b, "t", s, 2), 0);
	buf_release(&b);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_nodes),
		cmocka_unit_test(test_read_inventory),
		cmocka_unit_test(test_read_pods),
		cmocka_unit_test(test_rng),
		cmocka_unit_test(test_arrivals),
		cmocka_unit_test(test_replay_matches_plain_loop),
		cmocka_unit_test(test_replay_is_reproducible),
		cmocka_unit_test(test_gang_deadlock),
		cmocka_unit_test(test_gang_mix),
		cmocka_unit_test(test_gang_replay_trace),
		cmocka_unit_test(test_plot),
	};
	return cmocka_run_group_tests_name("sim", tests, NULL, NULL);
}
