/* kubectl gpu: the model, counts, disagreements, reports and their rendering, on objects as the API lists them. */
#include "testutil.h"

#include "kgpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON written with ' for " (the fixtures stay readable). */
static cJSON *J(const char *text)
{
	char *s = strdup(text);
	for (char *p = s; *p; p++)
		if (*p == '\'')
			*p = '"';
	cJSON *j = cJSON_Parse(s);
	free(s);
	assert_non_null(j);
	return j;
}

/*
 * Node a: 6 H100s on two islands; GPU 3 unhealthy. Its ledger: ml/p1 GPU 0
 * whole, ml/s1 a share of GPU 1, team-b/x GPU 2 whole, ml/ghost GPU 9 (the
 * agent lists no 9; no such pod). Node b: 2 A100s, free, with no ledger.
 */
#define DEV(i, isl, h) "{'id':" #i ",'uuid':'GPU-a-" #i "','vendor':'nvidia','model':'NVIDIA H100 80GB HBM3'," \
	"'memoryMiB':81559,'health':'" h "','island':'nvlink-" #isl "','bandwidthGBps':900}"
static const char GNS[] =
	"[{'metadata':{'name':'a'},'spec':{'nodeName':'a'},'status':{'total':6,'devices':["
	DEV(0, 0, "Healthy") "," DEV(1, 0, "Healthy") "," DEV(2, 0, "Healthy") "," DEV(3, 1, "Unhealthy") ","
	DEV(4, 1, "Healthy") "," DEV(5, 1, "Healthy") "]}},"
	"{'metadata':{'name':'b'},'status':{'total':2,'devices':["
	"{'id':0,'uuid':'GPU-b-0','vendor':'nvidia','model':'NVIDIA A100-SXM4-40GB','memoryMiB':40960,'health':'Healthy'},"
	"{'id':1,'uuid':'GPU-b-1','vendor':'nvidia','model':'NVIDIA A100-SXM4-40GB','memoryMiB':40960,'health':'Healthy'}"
	"]}}]";

static cJSON *ledgers(void)
{
	const char *list = "[{\"uid\":\"u-p1\",\"namespace\":\"ml\",\"pod\":\"p1\",\"mode\":\"Exclusive\",\"devices\":[0]},"
			   "{\"uid\":\"u-s1\",\"namespace\":\"ml\",\"pod\":\"s1\",\"mode\":\"Shared\",\"devices\":[1],"
			   "\"memoryMiB\":8192,\"coreMilli\":300},"
			   "{\"uid\":\"u-x\",\"namespace\":\"team-b\",\"pod\":\"x\",\"mode\":\"Exclusive\",\"devices\":[2]},"
			   "{\"uid\":\"u-g\",\"namespace\":\"ml\",\"pod\":\"ghost\",\"mode\":\"Exclusive\",\"devices\":[9]}]";
	cJSON *lease = J("{'metadata':{'name':'gpu-ledger.a','namespace':'gpu-system','resourceVersion':'7',"
			 "'labels':{'gpu.scheduling/ledger':'true'},'annotations':{'gpu.scheduling/node':'a'}}}");
	cJSON_AddStringToObject(cJSON_GetObjectItem(cJSON_GetObjectItem(lease, "metadata"), "annotations"),
				"gpu.scheduling/reservations", list);
	cJSON *arr = cJSON_CreateArray();
	cJSON_AddItemToArray(arr, lease);
	return arr;
}

/* Pods of ml: p1 and s1 bound as their entries say; q bound to a:5 without an entry; w waiting for 3 GPUs. */
static const char PODS[] =
	"[{'metadata':{'namespace':'ml','name':'p1','uid':'u-p1','labels':{'gpu.scheduling/managed':'true'},"
	"'annotations':{'gpu.scheduling/allocated':'a:0','gpu.scheduling/device-uuids':'GPU-a-0'}},"
	"'spec':{'nodeName':'a','containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]},"
	"'status':{'phase':'Running'}},"
	"{'metadata':{'namespace':'ml','name':'s1','uid':'u-s1','annotations':{'gpu.scheduling/allocated':'a:1'}},"
	"'spec':{'nodeName':'a','containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/gpu-memory':'8192',"
	"'gpu.scheduling/gpu-core':'30'}}}]},'status':{'phase':'Running'}},"
	"{'metadata':{'namespace':'ml','name':'q','uid':'u-q','annotations':{'gpu.scheduling/allocated':'a:5'}},"
	"'spec':{'nodeName':'a','containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]},"
	"'status':{'phase':'Running'}},"
	"{'metadata':{'namespace':'ml','name':'w','uid':'u-w'},"
	"'spec':{'containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/gpu':'3'}}}]},"
	"'status':{'phase':'Pending'}},"
	"{'metadata':{'namespace':'ml','name':'cpu','uid':'u-cpu'},'spec':{'containers':[{'name':'c'}]},"
	"'status':{'phase':'Running'}}]";

struct fixture {
	cJSON *gns, *led, *pods, *claims, *groups;
	struct kg_cluster c;
};

static void build(struct fixture *f, const char *pods_ns)
{
	f->gns = J(GNS);
	f->led = ledgers();
	f->pods = J(PODS);
	f->claims = cJSON_CreateArray();
	f->groups = cJSON_CreateArray();
	struct kg_inputs in = { f->gns, f->led, NULL, f->pods, f->claims, f->groups, NULL, NULL, pods_ns, pods_ns != NULL };
	char err[128];
	assert_int_equal(kg_cluster_build(&f->c, &in, err, sizeof(err)), 0);
}

static void teardown(struct fixture *f)
{
	kg_cluster_release(&f->c);
	cJSON_Delete(f->gns);
	cJSON_Delete(f->led);
	cJSON_Delete(f->pods);
	cJSON_Delete(f->claims);
	cJSON_Delete(f->groups);
}

/* GPU 0 and 2 whole, 1 shared, 3 unhealthy, 4 free; 5 is free in the ledger (q's missing entry). */
static void test_counts(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	assert_int_equal(f.c.n, 2);
	struct kg_counts k;
	kg_node_counts(kg_cluster_node(&f.c, "a"), &k);
	assert_int_equal(k.total, 6);
	assert_int_equal(k.whole, 2);
	assert_int_equal(k.shared, 1);
	assert_int_equal(k.unhealthy, 1);
	assert_int_equal(k.free, 2);
	/* Idle: 700 on the shared GPU 1, 1000 on 4 and on 5; only shares can use GPU 1's. */
	assert_true(k.frag_pct > 25.9 && k.frag_pct < 26.0);
	kg_node_counts(kg_cluster_node(&f.c, "b"), &k);
	assert_int_equal(k.total, 2);
	assert_int_equal(k.free, 2);
	assert_true(k.frag_pct == 0);   /* empty: nothing scattered */
	assert_true(k.fgd_gpus > 0);     /* but a 2-GPU node strands the workload's larger tasks */
	teardown(&f);
}

/* Another tenant's reservation is "other"; a pod of a readable namespace that is gone says so. */
static void test_holders(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	const struct kg_node *a = kg_cluster_node(&f.c, "a");
	char who[320];
	const char *want[] = { "ml/p1", "ml/s1", "other", "ml/ghost (no such pod)" };
	for (int k = 0; k < 4; k++) {
		kg_holder(&f.c, &a->led.e[k], who, sizeof(who));
		assert_string_equal(who, want[k]);
	}
	teardown(&f);
	build(&f, NULL);   /* every namespace readable: team-b/x is named (and gone) */
	kg_holder(&f.c, &kg_cluster_node(&f.c, "a")->led.e[2], who, sizeof(who));
	assert_string_equal(who, "team-b/x (no such pod)");
	teardown(&f);
}

static bool has_line(const cJSON *arr, const char *part)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, arr)
		if (strstr(it->valuestring, part))
			return true;
	return false;
}

/* Ledger and agent disagree: a device the agent does not list, a held unhealthy... and a pod without its entry. */
static void test_issues(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	cJSON *iss = cJSON_CreateArray();
	kg_node_issues(&f.c, kg_cluster_node(&f.c, "a"), iss);
	assert_true(has_line(iss, "ml/ghost (no such pod) holds GPU 9, which the agent does not list"));
	assert_true(has_line(iss, "pod ml/q is bound here with GPUs 5 but has no reservation"));
	assert_false(has_line(iss, "ml/p1"));   /* its entry matches its annotation */
	cJSON_Delete(iss);
	iss = cJSON_CreateArray();
	kg_node_issues(&f.c, kg_cluster_node(&f.c, "b"), iss);
	assert_int_equal(cJSON_GetArraySize(iss), 0);
	cJSON_Delete(iss);
	teardown(&f);
}

/* A pod whose allocation is of a newer format than this kubectl-gpu reads: named as such, not compared. */
static void test_issue_newer_allocation(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	const cJSON *it;
	cJSON_ArrayForEach(it, f.pods) {
		const cJSON *md = cJSON_GetObjectItem(it, "metadata");
		if (!strcmp(cJSON_GetObjectItem(md, "name")->valuestring, "q"))
			cJSON_AddStringToObject(cJSON_GetObjectItem(md, "annotations"), "gpu.scheduling/allocation-version", "2");
	}
	cJSON *iss = cJSON_CreateArray();
	kg_node_issues(&f.c, kg_cluster_node(&f.c, "a"), iss);
	assert_true(has_line(iss, "pod ml/q: gpu.scheduling/allocation-version 2 is newer than this program reads"));
	assert_false(has_line(iss, "pod ml/q is bound here"));
	cJSON_Delete(iss);
	teardown(&f);
}

static char *render(const char *kind, const cJSON *doc, bool wide)
{
	struct buf out;
	buf_init(&out, 1 << 20);
	struct kg_style st = { .wide = wide, .color = false };
	assert_int_equal(kg_render(kind, doc, &st, &out), 0);
	return buf_detach(&out, NULL);
}

static void test_nodes_table(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	char err[128];
	cJSON *doc = kg_report_nodes(&f.c, err, sizeof(err));
	assert_non_null(doc);
	char *text = render("nodes", doc, false);
	/* Columns padded as kubectl pads them; issues under the table, node by node. */
	assert_non_null(strstr(text, "NODE   GPUS   WHOLE   SHARED   FREE   UNHEALTHY   FRAG   MODELS\n"));
	assert_non_null(strstr(text, "\na      6      2       1        2      1           "));
	assert_non_null(strstr(text, "NVIDIA H100 80GB HBM3\n"));
	assert_non_null(strstr(text, "\nb      2      0       0        2      0           "));
	assert_non_null(strstr(text, "! a: ledger: pod ml/q is bound here"));
	assert_non_null(strstr(text, "note: pods of namespaces other than ml not readable"));
	assert_null(strstr(text, "\033["));   /* no colour unless asked */
	free(text);
	cJSON_Delete(doc);
	teardown(&f);
}

/* The grid: one line per island, a letter per holder, lower case for a share. */
static void test_node_grid(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	char err[128];
	assert_null(kg_report_node(&f.c, "nope", err, sizeof(err)));
	assert_string_equal(err, "node nope has neither a GpuNodeStatus nor a ledger");
	cJSON *doc = kg_report_node(&f.c, "a", err, sizeof(err));
	assert_non_null(doc);
	char *text = render("node", doc, false);
	assert_non_null(strstr(text, "a: 6 GPUs, 2 free"));
	assert_non_null(strstr(text, "  nvlink-0   [0 A] [1 b] [2 C]\n"));
	assert_non_null(strstr(text, "  nvlink-1   [3 X] [4 .] [5 .]\n"));
	assert_non_null(strstr(text, "A/a ml/p1   B/b ml/s1   C/c other"));
	assert_non_null(strstr(text, "ml/s1 (8192 MiB, 30%)"));
	free(text);
	cJSON_Delete(doc);
	teardown(&f);
}

/* -o html: the node's devices drawn with the ledger's holders, as the reader may see them. */
static void test_node_html(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	char err[128];
	struct buf out;
	buf_init(&out, (size_t)1 << 20);
	assert_int_equal(kg_html(&f.c, "nope", &out, err, sizeof(err)), -1);
	assert_string_equal(err, "node nope has neither a GpuNodeStatus nor a ledger");
	assert_int_equal(kg_html(&f.c, "a", &out, err, sizeof(err)), 0);
	const char *s = buf_cstr(&out);
	assert_non_null(strstr(s, "<section class=\"node\" data-node=\"a\">"));
	assert_null(strstr(s, "data-node=\"b\""));
	assert_non_null(strstr(s, "data-device=\"0\" data-state=\"held\""));
	assert_non_null(strstr(s, "data-device=\"1\" data-state=\"shared\""));
	assert_non_null(strstr(s, "data-device=\"3\" data-state=\"unhealthy\""));
	assert_non_null(strstr(s, "data-device=\"4\" data-state=\"free\""));
	assert_non_null(strstr(s, "data-holder=\"ml/p1\" data-group=\"ml/p1\""));
	assert_non_null(strstr(s, ">ml/s1 8192 MiB, 30%<"));
	/* team-b's pod is not the reader's to name. */
	assert_non_null(strstr(s, "data-holder=\"other\""));
	assert_null(strstr(s, "team-b"));
	/* ml/ghost holds GPU 9, which the agent does not list: the node's note says so. */
	const char *note = strstr(s, "<p class=\"note\">");
	assert_non_null(note);
	assert_non_null(strstr(note, "ledger: ml/ghost (no such pod) holds GPU 9, which the agent does not list"));
	buf_clear(&out);
	assert_int_equal(kg_html(&f.c, NULL, &out, err, sizeof(err)), 0);
	assert_non_null(strstr(buf_cstr(&out), "data-node=\"b\""));
	assert_non_null(strstr(buf_cstr(&out), "2 nodes, 8 GPUs: 4 free, 2 held whole, 1 shared, 1 unhealthy"));
	buf_release(&out);
	teardown(&f);
}

static void test_pods(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	char err[128];
	cJSON *doc = kg_report_pods(&f.c, err, sizeof(err));
	cJSON *items = cJSON_GetObjectItem(doc, "items");
	assert_int_equal(cJSON_GetArraySize(items), 4);   /* not the CPU pod */
	const char *want[][4] = { { "p1", "0", "1 whole", "ok" }, { "q", "5", "1 whole", "missing" },
				  { "s1", "1", "1 shared (8192 MiB, 30%)", "ok" }, { "w", "", "3 whole", "" } };
	for (int i = 0; i < 4; i++) {
		cJSON *p = cJSON_GetArrayItem(items, i);
		assert_string_equal(cJSON_GetObjectItem(p, "name")->valuestring, want[i][0]);
		assert_string_equal(cJSON_GetObjectItem(p, "devices")->valuestring, want[i][1]);
		assert_string_equal(cJSON_GetObjectItem(p, "asks")->valuestring, want[i][2]);
		assert_string_equal(cJSON_GetObjectItem(p, "reservation")->valuestring, want[i][3]);
	}
	char *text = render("pods", doc, false);
	assert_non_null(strstr(text, "NAMESPACE   POD   PHASE     NODE   GPUS   ASKS"));
	free(text);
	cJSON_Delete(doc);
	teardown(&f);
}

/* ml/w asks 3 whole GPUs: node a has 2 free, b has 2 in all; it would fit a once freed. */
static void test_why(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	char err[128];
	assert_null(kg_report_why(&f.c, "ml", "nope", err, sizeof(err)));
	cJSON *doc = kg_report_why(&f.c, "ml", "w", err, sizeof(err));
	assert_non_null(doc);
	assert_int_equal(cJSON_GetObjectItem(doc, "nodes")->valueint, 2);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "fitsNow")), 0);
	assert_int_equal(cJSON_GetObjectItem(doc, "fitsEmpty")->valueint, 1);
	cJSON *reasons = cJSON_GetObjectItem(doc, "reasons");
	assert_int_equal(cJSON_GetArraySize(reasons), 2);
	assert_string_equal(cJSON_GetObjectItem(doc, "verdict")->valuestring,
			    "no node has room now; 1 node would take it once GPUs there are freed");
	char *text = render("why", doc, false);
	assert_non_null(strstr(text, "Pod ml/w asks 3 whole\n"));
	assert_non_null(strstr(text, "Nodes: 2, fit now: 0, would fit if empty: 1\n"));
	assert_non_null(strstr(text, "NODES   REASON\n1       "));
	free(text);
	cJSON_Delete(doc);
	/* A bound pod is not waiting. */
	doc = kg_report_why(&f.c, "ml", "p1", err, sizeof(err));
	assert_string_equal(cJSON_GetObjectItem(doc, "verdict")->valuestring, "bound to a with GPUs 0");
	cJSON_Delete(doc);
	teardown(&f);
}

/* A PodGroup gang with 2 of its 3 members: it waits for the third. */
static void test_why_gang(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	kg_cluster_release(&f.c);
	for (int i = 0; i < 2; i++) {
		char pod[400];
		snprintf(pod, sizeof(pod), "{'metadata':{'namespace':'ml','name':'g%d','uid':'u-g%d',"
			 "'labels':{'scheduling.x-k8s.io/pod-group':'pg'}},'spec':{'containers':[{'name':'c',"
			 "'resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]},'status':{'phase':'Pending'}}", i, i);
		cJSON_AddItemToArray(f.pods, J(pod));
	}
	cJSON_AddItemToArray(f.groups, J("{'metadata':{'namespace':'ml','name':'pg'},'spec':{'minMember':3}}"));
	struct kg_inputs in = { f.gns, f.led, NULL, f.pods, f.claims, f.groups, NULL, NULL, "ml", true };
	char err[128];
	assert_int_equal(kg_cluster_build(&f.c, &in, err, sizeof(err)), 0);
	cJSON *doc = kg_report_why(&f.c, "ml", "g0", err, sizeof(err));
	cJSON *g = cJSON_GetObjectItem(doc, "gang");
	assert_non_null(g);
	assert_int_equal(cJSON_GetObjectItem(g, "present")->valueint, 2);
	assert_int_equal(cJSON_GetObjectItem(g, "needed")->valueint, 3);
	assert_int_equal(cJSON_GetObjectItem(g, "bound")->valueint, 0);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(g, "fits")));   /* 3 single GPUs: a has 2, b has 2 */
	assert_string_equal(cJSON_GetObjectItem(doc, "verdict")->valuestring,
			    "waits for its gang: 2 of 3 members exist; none is placed before all are there");
	cJSON_Delete(doc);
	teardown(&f);
}

/* Two pending single-GPU members of ml whose spec carries gang (a workloadRef or a schedulingGroup). */
static void add_members(cJSON *pods, const char *prefix, const char *gang)
{
	for (int i = 0; i < 2; i++) {
		char pod[600];
		snprintf(pod, sizeof(pod), "{'metadata':{'namespace':'ml','name':'%s%d','uid':'u-%s%d'},"
			 "'spec':{%s,'containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]},"
			 "'status':{'phase':'Pending'}}", prefix, i, prefix, i, gang);
		cJSON_AddItemToArray(pods, J(pod));
	}
}

/*
 * Gangs of Kubernetes' own API: a 1.35 Workload's pod group (minCount 3,
 * replica r1) and a 1.36+ scheduling.k8s.io PodGroup (minCount 4). Each has
 * 2 members; needed is the object's minCount. A gang whose object was not
 * read (the API not served) still shows 0 needed.
 */
static void test_why_native_gang(void **state)
{
	(void)state;
	struct fixture f;
	build(&f, "ml");
	kg_cluster_release(&f.c);
	add_members(f.pods, "w", "'workloadRef':{'name':'job','podGroup':'workers','podGroupReplicaKey':'r1'}");
	add_members(f.pods, "s", "'schedulingGroup':{'podGroupName':'sg'}");
	add_members(f.pods, "x", "'schedulingGroup':{'podGroupName':'unread'}");
	cJSON *wl = J("[{'metadata':{'namespace':'ml','name':'job'},'spec':{'podGroups':["
		      "{'name':'leader','policy':{'basic':{}}},{'name':'workers','policy':{'gang':{'minCount':3}}}]}},"
		      "{'metadata':{'namespace':'other','name':'job'},'spec':{'podGroups':["
		      "{'name':'workers','policy':{'gang':{'minCount':9}}}]}}]");
	cJSON *pg = J("[{'metadata':{'namespace':'other','name':'sg'},'spec':{'schedulingPolicy':{'gang':{'minCount':9}}}},"
		      "{'metadata':{'namespace':'ml','name':'sg'},'spec':{'schedulingPolicy':{'gang':{'minCount':4}}}}]");
	struct kg_inputs in = { f.gns, f.led, NULL, f.pods, f.claims, f.groups, wl, pg, "ml", true };
	char err[128];
	assert_int_equal(kg_cluster_build(&f.c, &in, err, sizeof(err)), 0);
	const char *const pods[] = { "w0", "s0", "x0" };
	const int needed[] = { 3, 4, 0 };
	for (int i = 0; i < 3; i++) {
		cJSON *doc = kg_report_why(&f.c, "ml", pods[i], err, sizeof(err));
		cJSON *g = cJSON_GetObjectItem(doc, "gang");
		assert_non_null(g);
		assert_int_equal(cJSON_GetObjectItem(g, "present")->valueint, 2);
		assert_int_equal(cJSON_GetObjectItem(g, "needed")->valueint, needed[i]);
		if (needed[i]) {
			char want[128];
			snprintf(want, sizeof(want), "waits for its gang: 2 of %d members exist; none is placed before "
				 "all are there", needed[i]);
			assert_string_equal(cJSON_GetObjectItem(doc, "verdict")->valuestring, want);
		}
		cJSON_Delete(doc);
	}
	cJSON_Delete(wl);
	cJSON_Delete(pg);
	teardown(&f);
}

/* Nothing to read: the notes say why the report is empty. */
static void test_forbidden(void **state)
{
	(void)state;
	cJSON *pods = J(PODS);
	struct kg_inputs in = { NULL, NULL, NULL, pods, NULL, NULL, NULL, NULL, "ml", false };
	struct kg_cluster c;
	char err[128];
	assert_int_equal(kg_cluster_build(&c, &in, err, sizeof(err)), 0);
	assert_true(has_line(c.notes, "GpuNodeStatus not readable"));
	assert_true(has_line(c.notes, "ledger Leases not readable"));
	cJSON *doc = kg_report_pods(&c, err, sizeof(err));
	cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "items"), 0);
	assert_string_equal(cJSON_GetObjectItem(p0, "devices")->valuestring, "0");   /* from its annotation */
	assert_string_equal(cJSON_GetObjectItem(p0, "reservation")->valuestring, "");
	assert_false(has_line(cJSON_GetObjectItem(doc, "notes"), "GpuNodeStatus"));   /* pods do not need it */
	assert_true(has_line(cJSON_GetObjectItem(doc, "notes"), "ledger Leases not readable"));
	cJSON_Delete(doc);
	/* why cannot tell where it fits without the devices, and says so instead of "fits nowhere". */
	doc = kg_report_why(&c, "ml", "w", err, sizeof(err));
	assert_string_equal(cJSON_GetObjectItem(doc, "verdict")->valuestring,
			    "cannot tell where it fits: GpuNodeStatus is not readable with these credentials (see the "
			    "pod's events)");
	cJSON_Delete(doc);
	kg_cluster_release(&c);
	cJSON_Delete(pods);
}

/* Ledgers readable, GpuNodeStatus not (view in gpu-system only): the node's reservations, others' as "other". */
static void test_node_ledger_only(void **state)
{
	(void)state;
	cJSON *led = ledgers(), *pods = J(PODS);
	struct kg_inputs in = { NULL, led, NULL, pods, NULL, NULL, NULL, NULL, "ml", true };
	struct kg_cluster c;
	char err[128];
	assert_int_equal(kg_cluster_build(&c, &in, err, sizeof(err)), 0);
	cJSON *doc = kg_report_node(&c, "a", err, sizeof(err));
	assert_non_null(doc);
	char *text = render("node", doc, false);
	assert_non_null(strstr(text, "a: no devices known (see the notes)\n"));
	assert_non_null(strstr(text, "\nother                    Exclusive   2\n"));
	assert_null(strstr(text, "team-b"));
	assert_null(strstr(text, "agent publishes no GpuNodeStatus"));   /* unreadable is not missing */
	free(text);
	cJSON_Delete(doc);
	kg_cluster_release(&c);
	cJSON_Delete(led);
	cJSON_Delete(pods);
}

static void test_yaml(void **state)
{
	(void)state;
	cJSON *doc = J("{'items':[{'node':'a','n':2,'ok':true,'models':['x y','true'],'e':[],'o':{}},{'node':'1'}],"
		       "'notes':['a: b'],'m':{'k':-1.5,'s':''}}");
	struct buf out;
	buf_init(&out, 1 << 16);
	assert_int_equal(kg_yaml(doc, &out), 0);
	assert_string_equal(buf_cstr(&out), "items:\n"
					    "- node: a\n"
					    "  n: 2\n"
					    "  ok: true\n"
					    "  models:\n"
					    "  - x y\n"
					    "  - \"true\"\n"
					    "  e: []\n"
					    "  o: {}\n"
					    "- node: \"1\"\n"
					    "notes:\n"
					    "- \"a: b\"\n"
					    "m:\n"
					    "  k: -1.5\n"
					    "  s: \"\"\n");
	buf_release(&out);
	cJSON_Delete(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts),    cmocka_unit_test(test_holders), cmocka_unit_test(test_issues),
		cmocka_unit_test(test_issue_newer_allocation),
		cmocka_unit_test(test_nodes_table), cmocka_unit_test(test_node_grid), cmocka_unit_test(test_pods),
		cmocka_unit_test(test_why),       cmocka_unit_test(test_why_gang),
		cmocka_unit_test(test_why_native_gang), cmocka_unit_test(test_forbidden),
		cmocka_unit_test(test_node_ledger_only), cmocka_unit_test(test_yaml), cmocka_unit_test(test_node_html),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
